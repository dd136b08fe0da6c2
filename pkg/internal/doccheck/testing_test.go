package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docs/TESTING.md names tests that exist: a renamed or removed test
// takes its line with it.
func TestTheTestingPageNamesRealTests(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "TESTING.md"))
	require.NoError(t, err)
	defined := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	require.NoError(t, filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		for _, m := range decl.FindAllSubmatch(src, -1) {
			defined[string(m[1])] = true
		}
		return err
	}))
	named := regexp.MustCompile("`\\^?(Test[A-Za-z0-9]+)\\$?`").FindAllSubmatch(doc, -1)
	require.GreaterOrEqual(t, len(named), 10)
	for _, m := range named {
		require.True(t, defined[string(m[1])], "docs/TESTING.md names %s, which no test file defines", m[1])
	}
}
