package arch_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// declared calls f with every name a file declares: functions, methods,
// types, struct fields, variables and constants, and every envconfig tag.
func declared(t *testing.T, path string, f func(name string)) {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	require.NoError(t, err)
	ast.Inspect(file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			f(n.Name.Name)
		case *ast.TypeSpec:
			f(n.Name.Name)
		case *ast.ValueSpec:
			for _, id := range n.Names {
				f(id.Name)
			}
		case *ast.Field:
			for _, id := range n.Names {
				f(id.Name)
			}
			if n.Tag != nil {
				f(reflect.StructTag(strings.Trim(n.Tag.Value, "`")).Get("envconfig"))
			}
		}
		return true
	})
}

// One word, one meaning. A claim is a buyer's: the reaper's taking over
// of stale stream entries is a takeover (FLASHSALE_TAKEOVER_MIN_IDLE,
// RescuerResult.TakenOver, upkeep's TakeOver), so nothing on the streams' side
// (the reaper, upkeep, the persisting code, the worker) is named after a
// claim. A pass is a waiting room's: one run of a reaper service is a
// round (what its result type counts, FLASHSALE_REAPER_ROUND_TIMEOUT), so nothing in the reaper
// is named after a pass.
func TestTakeoverAndRoundNameOneThingEach(t *testing.T) {
	words := map[string]*regexp.Regexp{
		"pkg/reaper":     regexp.MustCompile(`(?i)claim|pass(?:es)?(?:$|[^we])|PASS(?:_|$)`),
		"pkg/rdb/upkeep": regexp.MustCompile(`(?i)claim`),
		"pkg/persist":    regexp.MustCompile(`(?i)claim`),
		"pkg/worker":     regexp.MustCompile(`(?i)claim`),
		"pkg/reaper/cli": regexp.MustCompile(`(?i)claim`),
		"pkg/worker/cli": regexp.MustCompile(`(?i)claim`),
	}
	checked := 0
	for _, p := range list(t) {
		rel, ok := strings.CutPrefix(p.ImportPath, module)
		re := words[rel]
		if !ok || re == nil {
			continue
		}
		for _, f := range p.GoFiles {
			declared(t, filepath.Join(p.Dir, f), func(name string) {
				require.False(t, re.MatchString(name), "%s/%s: %q: a claim is a buyer's, a pass a waiting room's", rel, f, name)
			})
		}
		checked++
	}
	require.Equal(t, len(words), checked, "the packages were checked")
}

// Two webhooks, named apart: the payment provider's, coming in, is
// pkg/payment's; the order events', going out, are pkg/event's sinks. No
// package is named after the word alone.
func TestTheTwoWebhooksAreNamedApart(t *testing.T) {
	for _, p := range list(t) {
		rel, ok := strings.CutPrefix(p.ImportPath, module)
		if ok {
			require.NotEqual(t, "webhook", filepath.Base(rel), "%s: name the webhook's side (payment, event)", rel)
		}
	}
}

// pkg/internal is the tests' and tools' house: no shipped package imports
// from it (the events' JSON strings were once appended by a package
// there, an arrow running back up).
func TestNoShippedPackageImportsTheTestsHouse(t *testing.T) {
	checked := 0
	for _, p := range list(t) {
		rel, ok := strings.CutPrefix(p.ImportPath, module)
		if !ok || strings.HasPrefix(rel, "pkg/internal/") {
			continue
		}
		for _, imp := range p.Imports {
			require.False(t, strings.HasPrefix(imp, module+"pkg/internal/"), "%s imports %s", rel, imp)
		}
		checked++
	}
	require.Greater(t, checked, 20)
}

// The persisting side says orders for orders: a slice of StreamOrder
// (the orders read from stream entries, up to 32 an entry) is never named
// entries, whatever declares it (a parameter, a field, a variable).
func TestOrdersAreNamedOrders(t *testing.T) {
	for _, p := range list(t) {
		rel, ok := strings.CutPrefix(p.ImportPath, module)
		if !ok || !slices.Contains([]string{"pkg/rdb", "pkg/rdb/upkeep", "pkg/persist", "pkg/worker", "pkg/reaper", "pkg/reaper/cli", "pkg/worker/cli"}, rel) {
			continue
		}
		for _, f := range p.GoFiles {
			file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(p.Dir, f), nil, parser.SkipObjectResolution)
			require.NoError(t, err)
			ast.Inspect(file, func(n ast.Node) bool {
				var names []*ast.Ident
				var typ ast.Expr
				switch n := n.(type) {
				case *ast.Field:
					names, typ = n.Names, n.Type
				case *ast.ValueSpec:
					names, typ = n.Names, n.Type
				}
				if at, ok := typ.(*ast.ArrayType); ok {
					elem := ""
					switch e := at.Elt.(type) {
					case *ast.Ident:
						elem = e.Name
					case *ast.SelectorExpr:
						elem = e.Sel.Name
					}
					for _, id := range names {
						require.False(t, elem == "StreamOrder" && strings.EqualFold(id.Name, "entries"), "%s/%s: %s holds orders: name it so", rel, f, id.Name)
					}
				}
				return true
			})
		}
	}
}

// A new engineer listing the packages reads the map: every package's doc
// opens with the sentence that says what it is for ("Package x is…",
// "Command x …"), and one file alone carries it, so that go doc and a
// reader opening the files see the same words.
func TestEveryPackageSaysWhatItIsFor(t *testing.T) {
	pkgs := goList(t, "../../../...")
	require.Greater(t, len(pkgs), 40, "go list found the module's packages")
	for _, p := range pkgs {
		opening := "Package " + p.Name + " "
		if p.Name == "main" {
			opening = "Command " + filepath.Base(p.Dir) + " "
		}
		require.Truef(t, strings.HasPrefix(p.Doc, opening), "%s: its doc %q does not open with %q", p.ImportPath, p.Doc, opening)
		var with []string
		for _, f := range p.GoFiles {
			file, err := parser.ParseFile(token.NewFileSet(), filepath.Join(p.Dir, f), nil, parser.PackageClauseOnly|parser.ParseComments)
			require.NoError(t, err)
			if file.Doc != nil {
				with = append(with, f)
			}
		}
		require.Lenf(t, with, 1, "%s: one file carries the package's doc, not %v", p.ImportPath, with)
	}
}
