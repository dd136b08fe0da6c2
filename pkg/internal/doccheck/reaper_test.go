package doccheck

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/reaper"
)

// The reaper's services, as docs/ARCHITECTURE.md's table and the
// passes metric's labels in docs/OPERATIONS.md name them, are the ones
// it runs, in order.
func TestTheReapersServicesAreDocumented(t *testing.T) {
	want := reaper.ServiceNames()
	_, table, ok := strings.Cut(read(t, "ARCHITECTURE.md"), "| service | file | interval | what a round does |")
	require.True(t, ok)
	var inTable []string
	row := regexp.MustCompile("^\\| `([a-z]+)` \\| `((?:[a-z]+/)?([a-z]+\\.go))` \\|")
	for _, l := range strings.Split(table, "\n")[2:] {
		m := row.FindStringSubmatch(l)
		if m == nil {
			break
		}
		require.Equal(t, m[1]+".go", m[3], "a service's file is named after it")
		path := filepath.Join("..", "..", "..", "pkg", "reaper", m[2]) // pkg/reaper's, or another package's (event/sequencer.go)
		if strings.Contains(m[2], "/") {
			path = filepath.Join("..", "..", "..", "pkg", m[2])
		}
		require.FileExists(t, path, "the file docs/ARCHITECTURE.md names for the %s service", m[1])
		inTable = append(inTable, m[1])
	}
	require.Equal(t, want, inTable, "docs/ARCHITECTURE.md, The reaper's services")

	labels := regexp.MustCompile("`flashsale_reaper_passes_total` \\| reaper \\| `service` \\(([^)]*)\\)").FindStringSubmatch(read(t, "OPERATIONS.md"))
	require.NotNil(t, labels, "docs/OPERATIONS.md describes flashsale_reaper_passes_total's service label")
	var inOps []string
	for _, m := range regexp.MustCompile("`([a-z]+)`").FindAllStringSubmatch(labels[1], -1) {
		inOps = append(inOps, m[1])
	}
	require.Equal(t, want, inOps, "docs/OPERATIONS.md, flashsale_reaper_passes_total")
}
