package arch_test

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/flashsale/flashsale/"

type pkg struct {
	ImportPath string
	Dir        string
	Name, Doc  string
	GoFiles    []string
	Imports    []string
	Deps       []string
	Export     string
}

// list runs go list -json -deps -export over the module's code (tests
// excluded: what ships).
func list(t *testing.T) map[string]*pkg {
	t.Helper()
	pkgs := map[string]*pkg{}
	for _, p := range goList(t, "-deps", "-export", "../../../pkg/...", "../../../cmd/...") {
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// goList runs go list -json with args and returns the packages it lists.
func goList(t *testing.T, args ...string) []*pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json"}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), errOut.String())
	var pkgs []*pkg
	dec := json.NewDecoder(&out)
	for {
		var p pkg
		err := dec.Decode(&p)
		if err == io.EOF {
			return pkgs
		}
		require.NoError(t, err)
		pkgs = append(pkgs, &p)
	}
}

// The stores are siblings and settle alone ties them: pkg/db and pkg/rdb
// do not import each other (nor through another package), and the reaper
// processes entries through pkg/persist, not through the worker. The
// streams' upkeep (pkg/rdb/upkeep) is the reaper's and the operator's:
// neither the claim's path nor the workers' reaches it.
func TestStoresAreSiblings(t *testing.T) {
	pkgs := list(t)
	never := map[string][]string{
		"pkg/db":      {"pkg/rdb", "pkg/settle"},
		"pkg/rdb":     {"pkg/db", "pkg/settle"},
		"pkg/reaper":  {"pkg/worker"},
		"pkg/worker":  {"pkg/reaper", "pkg/rdb/upkeep"},
		"pkg/gateway": {"pkg/rdb/upkeep"},
		"pkg/sale":    {"pkg/db", "pkg/rdb"},
		"pkg/order":   {"pkg/db", "pkg/rdb"},
	}
	for from, tos := range never {
		p := pkgs[module+from]
		require.NotNil(t, p, from)
		for _, to := range tos {
			require.NotContains(t, p.Deps, module+to, "%s must not depend on %s", from, to)
		}
	}
}

// Each part of pkg/rdb that serves one client is imported by that client
// alone: admission (pkg/rdb/admission) by the gateway, the split protocol
// (pkg/rdb/split) by the reaper, each also by the benchmarks' tools, and
// no part of pkg/rdb imports either.
func TestTheRedisPartsServeTheirClients(t *testing.T) {
	pkgs := list(t)
	only := map[string][]string{
		"pkg/rdb/split":     {"pkg/reaper", "pkg/internal/bench"},
		"pkg/rdb/admission": {"pkg/gateway", "pkg/gateway/claimid", "pkg/internal/bench", "pkg/internal/cmd/scriptcost", "pkg/internal/testrdb"},
	}
	found := map[string]bool{}
	for path, p := range pkgs {
		rel, ok := strings.CutPrefix(path, module)
		if !ok {
			continue
		}
		for part, clients := range only {
			if slices.Contains(p.Imports, module+part) {
				found[part] = true
				require.Contains(t, clients, rel, "%s imports %s, which serves %v alone", rel, part, clients)
			}
		}
	}
	for part := range only {
		require.True(t, found[part], "%s is imported by its client", part)
	}
}

// The roles are libraries the binaries wire: none depends on the
// wiring (pkg/app: configuration, loggers, the CLI); what they share of it
// (trace fields in log lines, the counts, the ops endpoints) is pkg/ops.
func TestTheRolesDoNotImportTheWiring(t *testing.T) {
	pkgs := list(t)
	for _, role := range []string{"pkg/gateway", "pkg/worker", "pkg/persist", "pkg/reaper"} {
		p := pkgs[module+role]
		require.NotNil(t, p, role)
		require.NotContains(t, p.Deps, module+"pkg/app", "%s must not depend on pkg/app", role)
	}
}

// Every write that follows MySQL into Redis is a function of pkg/settle:
// outside it, no shipped package calls the Redis writes that apply what
// MySQL recorded, nor marks them applied in MySQL. (Test helpers under
// pkg/internal seed both stores directly.)
func TestOnlySettleWritesWhatMySQLRecorded(t *testing.T) {
	pkgs := list(t)
	guarded := map[string][]string{
		module + "pkg/rdb.Store": {"ApplyChange", "CreateVoucher", "PutVoucher", "Release", "RewriteVoucher", "RestoreVoucher"},
		module + "pkg/db.Store":  {"MarkReleased", "MarkChangesApplied"},
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		p, ok := pkgs[path]
		if !ok || p.Export == "" {
			return nil, os.ErrNotExist
		}
		return os.Open(p.Export)
	})
	checked := 0
	for path, p := range pkgs {
		if !strings.HasPrefix(path, module) || strings.HasPrefix(path, module+"pkg/internal/") ||
			path == module+"pkg/settle" || path == module+"pkg/rdb" || path == module+"pkg/db" {
			continue
		}
		var files []*ast.File
		for _, f := range p.GoFiles {
			af, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, 0)
			require.NoError(t, err)
			files = append(files, af)
		}
		info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}}
		_, err := (&types.Config{Importer: imp}).Check(path, fset, files, info)
		require.NoError(t, err, path)
		for sel, s := range info.Selections {
			recv := s.Recv()
			if ptr, ok := recv.(*types.Pointer); ok {
				recv = ptr.Elem()
			}
			named, ok := recv.(*types.Named)
			if !ok || named.Obj().Pkg() == nil {
				continue
			}
			name := named.Obj().Pkg().Path() + "." + named.Obj().Name()
			if slices.Contains(guarded[name], s.Obj().Name()) {
				t.Errorf("%s calls %s.%s at %s: MySQL → Redis writes go through pkg/settle", path, name, s.Obj().Name(), fset.Position(sel.Pos()))
			}
		}
		checked++
	}
	require.Greater(t, checked, 5, "the roles' packages were checked")
}

// One word, one meaning: "settle" is pkg/settle's (a write MySQL recorded
// applied to Redis once), so no function, method or type elsewhere is
// named after it; an order read from a stream is a StreamOrder, never an
// "Entry" on the path of an order (a stream entry carries up to 32
// orders).
func TestSettleAndEntryNameOneThingEach(t *testing.T) {
	for _, p := range list(t) {
		rel, ok := strings.CutPrefix(p.ImportPath, module)
		if !ok || rel == "pkg/settle" {
			continue
		}
		for _, f := range p.GoFiles {
			file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(p.Dir, f), nil, parser.SkipObjectResolution)
			require.NoError(t, err)
			for _, d := range file.Decls {
				var names []string
				switch d := d.(type) {
				case *ast.FuncDecl:
					names = append(names, d.Name.Name)
				case *ast.GenDecl:
					for _, s := range d.Specs {
						if ts, ok := s.(*ast.TypeSpec); ok {
							names = append(names, ts.Name.Name)
						}
					}
				}
				for _, n := range names {
					require.NotContains(t, strings.ToLower(n), "settle", "%s/%s: %s is named after pkg/settle's word", rel, f, n)
					if slices.Contains([]string{"pkg/rdb", "pkg/persist", "pkg/worker", "pkg/reaper", "pkg/db"}, rel) { // the path of an order
						require.NotEqual(t, "Entry", n, "%s/%s: an order read from a stream is a StreamOrder", rel, f)
					}
				}
			}
		}
	}
}
