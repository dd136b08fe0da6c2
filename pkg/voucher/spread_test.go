package voucher_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/voucher"
)

// A split the masters would share evenly, or any on one Redis, passes; an
// uneven one is refused naming each master's buckets (most first) and the
// nearest even counts on either side, the one side there is, or what
// would place the buckets finer when no count would.
func TestSpreadNamesTheNearestEvenCounts(t *testing.T) {
	require.NoError(t, voucher.Spread(3, nil), "one Redis")
	require.NoError(t, voucher.Spread(3, &rdb.Spread{Even: true, ByMaster: map[string]int{"a:1": 1, "b:1": 1, "c:1": 1}}))
	by := map[string]int{"a:1": 1, "b:1": 0, "c:1": 2}
	for _, c := range []struct {
		below, above int
		want         string
	}{
		{2, 4, "stock_buckets 3 would put 2 buckets on c:1, 1 bucket on a:1, none on b:1: the 3 masters would not share them evenly; the nearest counts that would are 2 and 4"},
		{0, 6, "stock_buckets 3 would put 2 buckets on c:1, 1 bucket on a:1, none on b:1: the 3 masters would not share them evenly; the nearest count that would is 6"},
		{2, 0, "stock_buckets 3 would put 2 buckets on c:1, 1 bucket on a:1, none on b:1: the 3 masters would not share them evenly; the nearest count that would is 2"},
		{0, 0, "stock_buckets 3 would put 2 buckets on c:1, 1 bucket on a:1, none on b:1: the 3 masters would not share them evenly; no count up to 64 would (FLASHSALE_STREAM_PARTITIONS places the buckets: more partitions spread them finer)"},
	} {
		err := voucher.Spread(3, &rdb.Spread{ByMaster: by, Below: c.below, Above: c.above})
		require.EqualError(t, err, c.want)
	}
}
