package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
	"github.com/flashsale/flashsale/pkg/room"
)

// figures are the constants the manual quotes with their value: a figure
// written beside its constant's name ("16 times (`admission.DryAttempts`)", "32
// (order.MaxPerEntry)") is the constant's value, in every doc and script
// header, so a change of the constant fails here until the prose follows.
var figures = map[string]int64{
	"order.MaxPerEntry":               order.MaxPerEntry,
	"admission.DryAttempts":           admission.DryAttempts,
	"db.MaxEventsPerRow":              db.MaxEventsPerRow,
	"gateway.PipelineMaxBatchDefault": gateway.PipelineMaxBatchDefault,
	"room.MaxNoRoom":                  room.MaxNoRoom,
}

// The figures beside a constant's name in docs/*.md, README.md, the
// packages' docs (pkg/*/doc.go: the parts of the design told beside their
// code) and the Lua scripts' headers are its value (the nearest number before the name,
// within the same clause).
func TestTheFiguresBesideAConstantAreItsValue(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	var files []string
	for _, g := range []string{"docs/*.md", "README.md", "pkg/*/doc.go", "lua/*.lua"} {
		m, err := filepath.Glob(filepath.Join(root, g))
		require.NoError(t, err)
		files = append(files, m...)
	}
	number := regexp.MustCompile(`(\d[\d,]*)[^\d(]*$`)
	seen := map[string]int{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		text := string(raw)
		for name, want := range figures {
			for _, quoted := range []string{"(`" + name + "`", "(" + name + ")"} {
				for rest, at := text, 0; ; {
					i := strings.Index(rest, quoted)
					if i < 0 {
						break
					}
					before := rest[max(0, i-60):i]
					if j := strings.LastIndexAny(before, ".;:|\n"); j >= 0 && j < len(before)-1 && before[j] != '.' {
						before = before[j+1:]
					}
					if m := number.FindStringSubmatch(before); m != nil {
						got, err := strconv.ParseInt(strings.ReplaceAll(m[1], ",", ""), 10, 64)
						require.NoError(t, err)
						require.Equal(t, want, got, "%s: %q says %s is %d", filepath.Base(f), strings.TrimSpace(before)+quoted, name, got)
						seen[name]++
					}
					at += i + len(quoted)
					rest = text[at:]
				}
			}
		}
	}
	for name := range figures {
		require.Positive(t, seen[name], "no figure beside %s: quote it in the manual, or drop it here", name)
	}
}
