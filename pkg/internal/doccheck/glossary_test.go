package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// ARCHITECTURE.md's "Words" give each word one meaning and name where the
// code says it: a file, or a declaration as pkg.Name or pkg.Type.Method.
// Every name must exist, and the word must be in it or in what it
// documents (the declaration's doc comment, the file), so that a word
// renamed or removed in the code is renamed or removed in the glossary.
func TestTheGlossaryNamesTheCode(t *testing.T) {
	_, words, ok := strings.Cut(read(t, "ARCHITECTURE.md"), "\n## Words\n")
	require.True(t, ok, "ARCHITECTURE.md has its Words")
	words, _, _ = strings.Cut(words, "\n## ")
	root := filepath.Join("..", "..", "..")
	decls := declarations(t, root)
	name := regexp.MustCompile("`([^`]+)`")
	rows := 0
	for _, l := range strings.Split(words, "\n") {
		cols := strings.Split(l, " | ")
		if !strings.HasPrefix(l, "| ") || len(cols) != 3 || strings.HasPrefix(l, "| word ") {
			continue
		}
		rows++
		word := strings.TrimPrefix(cols[0], "| ")
		code := name.FindAllStringSubmatch(cols[2], -1)
		require.NotEmpty(t, code, "the word %q names no code", word)
		var said strings.Builder // the names and what they document
		for _, c := range code {
			n := c[1]
			if strings.Contains(n, "/") {
				b, err := os.ReadFile(filepath.Join(root, n))
				require.NoError(t, err, "the word %q names %s", word, n)
				said.WriteString(n + "\n" + string(b) + "\n")
				continue
			}
			doc, ok := decls[n]
			require.True(t, ok, "the word %q names %s, which the code does not declare", word, n)
			said.WriteString(n + "\n" + doc + "\n")
		}
		text := strings.ToLower(said.String())
		for _, w := range strings.Split(word, ", ") {
			require.True(t, strings.Contains(text, strings.ToLower(w)) || strings.Contains(text, strings.ToLower(strings.ReplaceAll(w, " ", ""))),
				"the word %q is neither in the names %v nor in what they document", w, code)
		}
	}
	require.GreaterOrEqual(t, rows, 20, "the glossary's words")
}

// declarations maps each declaration of the module's shipped packages
// under pkg/ (test infrastructure excluded), as pkg.Name or
// pkg.Type.Method, to its doc comment.
func declarations(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(filepath.Join(root, "pkg"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "internal" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		pkg := f.Name.Name
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				n := pkg + "." + d.Name.Name
				if d.Recv != nil && len(d.Recv.List) == 1 {
					n = pkg + "." + receiver(d.Recv.List[0].Type) + "." + d.Name.Name
				}
				out[n] = d.Doc.Text()
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						out[pkg+"."+s.Name.Name] = d.Doc.Text() + s.Doc.Text()
					case *ast.ValueSpec:
						for _, id := range s.Names {
							out[pkg+"."+id.Name] = d.Doc.Text() + s.Doc.Text() + s.Comment.Text()
						}
					}
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

// receiver is the name of a method's receiver type: T of T, *T or T[P].
func receiver(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiver(e.X)
	case *ast.IndexExpr:
		return receiver(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}
