package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// ARCHITECTURE.md's path of an order, file by file, names files that
// exist: a file renamed or split is renamed in the table too.
func TestTheOrdersPathNamesRealFiles(t *testing.T) {
	_, table, ok := strings.Cut(read(t, "ARCHITECTURE.md"), "### The path of an order, file by file")
	require.True(t, ok, "ARCHITECTURE.md has the path of an order, file by file")
	table, _, _ = strings.Cut(table, "\n## ")
	path := regexp.MustCompile("`((?:pkg|lua)/[^`]+\\.(?:go|lua))`")
	rows := 0
	for _, l := range strings.Split(table, "\n") {
		if !strings.HasPrefix(l, "| `") {
			continue
		}
		rows++
		first, _, _ := strings.Cut(strings.TrimPrefix(l, "|"), "|")
		files := path.FindAllStringSubmatch(first, -1)
		require.NotEmpty(t, files, "a row without a file: %s", l)
		for _, f := range files {
			_, err := os.Stat(filepath.Join("..", "..", "..", f[1]))
			require.NoError(t, err, "ARCHITECTURE.md names %s", f[1])
		}
	}
	require.GreaterOrEqual(t, rows, 15)
}
