package soldout_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/soldout"
)

// A flag covers what Redis's answer proves, for the refresh period; then
// one claim asks Redis again while the others are still answered here; an
// admission (or units back on this replica) clears it.
func TestAFlagCoversWhatRedisSaidForItsPeriod(t *testing.T) {
	var now int64
	c := soldout.New(200*time.Millisecond, func() int64 { return now })
	require.False(t, c.Prune(1, 1), "nothing known: ask Redis")
	c.SoldOutFor(1, 2) // fewer than 2 units left
	require.True(t, c.Prune(1, 2))
	require.True(t, c.Prune(1, 5), "more than 2 units: sold out too")
	require.False(t, c.Prune(1, 1), "1 unit may be left: ask Redis")
	require.False(t, c.Prune(2, 2), "another voucher")
	now += int64(150 * time.Millisecond)
	c.SoldOutFor(1, 3) // says nothing of claims of 2 units: the flag is not renewed
	require.True(t, c.Prune(1, 2))
	now += int64(60 * time.Millisecond) // 210 ms since the flag was set: stale
	require.False(t, c.Prune(1, 2), "one claim asks Redis again")
	require.True(t, c.Prune(1, 2), "the others meanwhile are still answered here")
	c.Admitted(1)
	require.False(t, c.Prune(1, 2), "an admission clears the flag")

	c.SoldOutFor(1, 1)
	now += int64(2 * time.Minute)
	c.Sweep()
	c.SoldOutFor(3, 1) // a fresh flag stays
	c.Sweep()
	require.True(t, c.Prune(3, 1))
	require.False(t, c.Prune(1, 1), "a flag nobody renewed for a minute is forgotten")

	off := soldout.New(0, func() int64 { return now })
	off.SoldOutFor(1, 1)
	require.False(t, off.Prune(1, 1), "a refresh of 0 turns pruning off")
	require.Zero(t, off.Refresh())
}
