package doccheck

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	schema "github.com/flashsale/flashsale/sql"
)

// docs/ARCHITECTURE.md's table of migrations names every file of sql/, in
// order, and no other.
func TestTheMigrationsTableIsSQL(t *testing.T) {
	migs, err := schema.Migrations()
	require.NoError(t, err)
	var files []string
	for _, m := range migs {
		files = append(files, m.Version)
	}
	_, table, ok := strings.Cut(read(t, "ARCHITECTURE.md"), "| migration | what it adds |")
	require.True(t, ok, "docs/ARCHITECTURE.md has a table of migrations")
	var documented []string
	row := regexp.MustCompile("^\\| `(\\d{4}_[a-z_]+)` \\|")
	for _, l := range strings.Split(table, "\n")[2:] {
		m := row.FindStringSubmatch(l)
		if m == nil {
			break
		}
		documented = append(documented, m[1])
	}
	require.Equal(t, files, documented, "docs/ARCHITECTURE.md's migrations against sql/")
}
