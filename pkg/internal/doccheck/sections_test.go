package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A reference to a section of the manual (`RUNBOOK.md, "The report of a
// sale"`, `ARCHITECTURE.md ("Between the stores")`, or a paragraph or a
// table's row named in bold), in the docs, the
// code, the scripts or the API's spec, names a heading that exists: a
// section moved or renamed fails here until its references follow (five
// pointed at sections of ARCHITECTURE.md that had moved to the packages'
// docs).
func TestReferencesToASectionNameOne(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	ref := regexp.MustCompile(`\b([A-Z]+\.md)(?:, | \()"([^"]+)"`)
	row := regexp.MustCompile(`^(?:\| )?\*\*([^*]+)\*\*`) // a table's row, or a paragraph, named in bold
	headings := map[string][]string{}
	heads := func(doc string) []string {
		if h, ok := headings[doc]; ok {
			return h
		}
		path := filepath.Join(root, "docs", doc)
		if doc == "README.md" {
			path = filepath.Join(root, doc)
		}
		raw, err := os.ReadFile(path)
		require.NoError(t, err, "a reference names %s", doc)
		var hs []string
		for _, l := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(l, "#") {
				hs = append(hs, strings.TrimSpace(strings.TrimLeft(l, "#")))
			} else if m := row.FindStringSubmatch(l); m != nil {
				hs = append(hs, m[1])
			}
		}
		headings[doc] = hs
		return hs
	}
	checked := 0
	for _, dir := range []string{"docs", "pkg", "lua", "api", "cmd", "helm"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			switch filepath.Ext(path) {
			case ".go", ".md", ".lua", ".yaml", ".js", ".html":
			default:
				return nil
			}
			if strings.HasSuffix(path, ".gen.go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			text := strings.ReplaceAll(strings.ReplaceAll(string(raw), "\n// ", " "), "\n", " ")
			for _, m := range ref.FindAllStringSubmatch(text, -1) {
				found := false
				for _, h := range heads(m[1]) {
					found = found || strings.HasPrefix(strings.ReplaceAll(h, "`", ""), strings.ReplaceAll(m[2], "`", ""))
				}
				require.True(t, found, "%s names %s, %q: no such heading", path, m[1], m[2])
				checked++
			}
			return nil
		})
		require.NoError(t, err)
	}
	t.Logf("%d references to a section checked", checked)
	require.Greater(t, checked, 10, "references checked")
}
