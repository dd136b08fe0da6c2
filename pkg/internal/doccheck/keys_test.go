package doccheck

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docs/ARCHITECTURE.md's table of Redis keys names every key pkg/rdb's
// key layout (keys.go) describes, and no other.
func TestTheKeyTableIsTheKeyLayout(t *testing.T) {
	src, err := os.ReadFile("../../rdb/keys.go")
	require.NoError(t, err)
	var layout []string
	for _, l := range strings.Split(string(src), "\n") {
		if f := strings.Fields(strings.TrimPrefix(l, "//")); strings.HasPrefix(l, "//\tflashsale:") && len(f) > 0 {
			layout = append(layout, f[0])
		}
	}
	require.GreaterOrEqual(t, len(layout), 15, "keys.go's layout")

	doc, err := os.ReadFile("../../../docs/ARCHITECTURE.md")
	require.NoError(t, err)
	name := regexp.MustCompile("`([^`]+)`")
	var table []string
	for _, row := range strings.Split(string(doc), "\n") {
		cells := strings.Split(row, " | ")
		if !strings.HasPrefix(row, "| `flashsale:") || len(cells) < 3 {
			continue
		}
		var first string
		for _, m := range name.FindAllStringSubmatch(cells[0], -1) {
			k := m[1]
			if rest, ok := strings.CutPrefix(k, "…"); ok { // the first name's prefix, then rest
				seg, _, _ := strings.Cut(rest[1:], ":")
				i := strings.Index(first, ":"+seg)
				require.GreaterOrEqual(t, i, 0, "%s: %s after %s", row, k, first)
				k = first[:i] + rest
			} else {
				first = k
			}
			table = append(table, k)
		}
	}
	slices.Sort(layout)
	slices.Sort(table)
	require.Equal(t, layout, table, "docs/ARCHITECTURE.md's key table against pkg/rdb/keys.go's layout")
}
