package harness_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/harness"
)

// TestRedisLosingItsLastWrites documents what appendfsync everysec risks
// and what reconcile --repair restores (docs/FAILURES.md).
func TestRedisLosingItsLastWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var log strings.Builder
	r, err := harness.RunDataLoss(ctx, t.TempDir(), 256<<10, &log)
	require.NoError(t, err, log.String())
	var out strings.Builder
	r.Print(&out)
	text := log.String() + "\n" + out.String() + "\n" + r.ReconcileOutput
	t.Log("\n" + text)
	if p := os.Getenv("DATALOSS_REPORT"); p != "" {
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	}
	require.Positive(t, r.AOFBytesCut)
	require.Positive(t, r.DiffsBefore, "losing the AOF tail leaves Redis behind MySQL")
	// What the repair restores, and what MySQL held throughout.
	require.Zero(t, r.DiffsAfter)
	require.Equal(t, r.RedisAfter, r.MySQLAfter)
	require.Equal(t, r.StockTotal, r.Live+r.MySQLAfter, "stock conserved")
	require.LessOrEqual(t, r.Live, r.StockTotal, "no oversell")
	require.Zero(t, r.UsersOverLimit, "MySQL held the per-user limit")
}
