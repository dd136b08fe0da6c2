package arch_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A doc comment of an exported name is a Go sentence about it: it begins
// with the name ("Split raises …", "A Segment says …", "ErrPaused means
// …"), so that go doc and pkgsite read as prose, not "Name: …" fragments
// (shipped code; generated and test code aside). In a group of constants
// or variables a comment may head several names; a fragment is refused
// there too.
func TestDocCommentsAreSentences(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir("../../../pkg", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "internal" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, ".gen.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		require.NoError(t, err)
		// check checks name's doc; in a group, whose comments may head a
		// run of names, only a "Name: …" fragment is refused.
		check := func(name string, doc *ast.CommentGroup, grouped bool) {
			if !ast.IsExported(name) || doc == nil {
				return
			}
			checked++
			text := doc.Text()
			if grouped && !strings.HasPrefix(text, name+":") {
				return
			}
			for _, lead := range []string{"", "A ", "An ", "The "} {
				if strings.HasPrefix(text, lead+name+" ") || strings.HasPrefix(text, lead+name+"'s ") {
					return
				}
			}
			first, _, _ := strings.Cut(text, "\n")
			t.Errorf("%s: the doc of %s is not a sentence about it: %q", fset.Position(doc.Pos()), name, first)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				check(d.Name.Name, d.Doc, false)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					doc := d.Doc
					if d.Lparen.IsValid() { // a group: each spec's own doc
						doc = nil
					}
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Doc != nil {
							doc = s.Doc
						}
						check(s.Name.Name, doc, d.Lparen.IsValid())
					case *ast.ValueSpec:
						if s.Doc != nil {
							doc = s.Doc
						}
						if len(s.Names) == 1 {
							check(s.Names[0].Name, doc, d.Lparen.IsValid())
						}
					}
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, checked, 500, "the exported names with a doc")
}
