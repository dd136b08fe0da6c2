package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docs/ARCHITECTURE.md's layout table names every package of pkg/ (the
// test infrastructure under pkg/internal by its own rows).
func TestTheLayoutNamesEveryPackage(t *testing.T) {
	_, table, ok := strings.Cut(read(t, "ARCHITECTURE.md"), "| path | what |")
	require.True(t, ok, "docs/ARCHITECTURE.md has a layout table")
	var firsts strings.Builder
	for _, l := range strings.Split(table, "\n")[2:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		firsts.WriteString(strings.Split(l, "|")[1])
	}
	root := filepath.Join("..", "..", "..", "pkg")
	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	for _, e := range entries {
		if !e.IsDir() || e.Name() == "internal" {
			continue
		}
		require.Contains(t, firsts.String(), "`pkg/"+e.Name()+"`", "docs/ARCHITECTURE.md's layout does not name pkg/%s", e.Name())
	}
}
