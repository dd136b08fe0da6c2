package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/app"
	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// PATCH stock_buckets asks for a voucher's buckets to be split while its
// sale runs (the reaper's splitter does it): the voucher answers with
// split_to. Lower than today's, not a multiple, above 64, on a draw, a
// pool or a voucher with a waiting room: 400 invalid_field naming
// stock_buckets, and nothing asked; so is one whose sale has ended.
func TestPatchStockBucketsAsksASplit(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"drop","stock":100,"stock_buckets":2}`)
	ends := f.clock.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	draw := f.createVoucher(`{"name":"draw","stock":5,"allocation":"draw","ends_at":"` + ends + `"}`)
	envelope := f.createVoucher(`{"name":"envelopes","kind":"envelope","total_amount":10000,"count":50}`)
	room := f.createVoucher(`{"name":"room","stock":5,"waiting_room":{"admit_per_second":5}}`)
	for _, c := range []struct{ id, body string }{
		{id, `{"stock_buckets":1}`},
		{id, `{"stock_buckets":2}`},
		{id, `{"stock_buckets":3}`},
		{id, `{"stock_buckets":66}`},
		{id, `{"stock_buckets":0}`},
		{draw, `{"stock_buckets":2}`},
		{envelope, `{"stock_buckets":2}`},
		{room, `{"stock_buckets":2}`},
	} {
		res := f.do("PATCH", "/admin/v1/vouchers/"+c.id, admin, c.body)
		requireError(t, res, http.StatusBadRequest, "invalid_field")
		require.True(t, strings.HasPrefix(res.Body["message"].(string), "stock_buckets"), res.Raw)
	}
	res := f.do("PATCH", "/admin/v1/vouchers/"+id, admin, `{"stock_buckets":8}`)
	require.Equal(t, http.StatusOK, res.Status, res.Raw)
	require.EqualValues(t, 2, res.Body["stock_buckets"], "its buckets now")
	require.EqualValues(t, 8, res.Body["split_to"], "the split under way")
	v, err := f.env.DB.Voucher(t.Context(), parseID(t, id))
	require.NoError(t, err)
	require.Equal(t, 8, v.SplitTo)
	requireError(t, f.do("PATCH", "/admin/v1/vouchers/"+id, admin, `{"stock_buckets":4}`), http.StatusBadRequest, "invalid_field")
	// With another change: both.
	res = f.do("PATCH", "/admin/v1/vouchers/"+id, admin, `{"add_stock":5,"stock_buckets":8}`)
	require.Equal(t, http.StatusOK, res.Status, res.Raw)
	require.EqualValues(t, 105, res.Body["stock"])
	require.EqualValues(t, 8, res.Body["split_to"])
	got := f.do("GET", "/admin/v1/vouchers/"+draw, admin, "")
	require.NotContains(t, got.Body, "split_to", "none asked")
	require.NotContains(t, got.Body, "buckets_by_master", "one Redis: no masters to show")
	// Once its sale has ended, a voucher keeps its buckets.
	ending := f.createVoucher(`{"name":"ending","stock":5,"ends_at":"` + ends + `"}`)
	f.clock.Set(f.clock.Now().Add(2 * time.Hour))
	res = f.do("PATCH", "/admin/v1/vouchers/"+ending, admin, `{"stock_buckets":2}`)
	requireError(t, res, http.StatusBadRequest, "invalid_field")
	require.Contains(t, res.Body["message"], "ended")
}

// On a Redis Cluster a split by hand covers the masters evenly: a count
// whose buckets would pile on some masters (bucket b lives in partition
// home+b, on that partition's slot's master) is refused, 400 naming how
// they would sit and the nearest counts that would share them; a count
// named there is taken, and the voucher's detail shows the buckets each
// master holds. What the test expects is counted here from the cluster's
// own slot owners, not from the gateway's.
func TestASplitByHandCoversTheMastersEvenly(t *testing.T) {
	ctx := context.Background()
	cluster, err := testsrv.StartCluster(t.TempDir(), 3)
	require.NoError(t, err)
	t.Cleanup(cluster.Kill)
	mysql := testenv.New(t, 2)
	c := app.Common{RedisAddr: strings.Join(cluster.Addrs(), ","), RedisCluster: true, RedisTimeout: 2 * time.Second,
		StreamPartitions: 8, ConsumerGroup: rdb.DefaultGroup, MySQLDSN: mysql.Common.MySQLDSN}
	rs, err := c.Redis(ctx, 16)
	require.NoError(t, err)
	t.Cleanup(func() { rs.Client().Close() })
	require.NoError(t, rs.Load(ctx))
	require.NoError(t, rs.EnsureGroups(ctx))
	f := newFixtureOn(t, &testenv.Env{Common: c, RDB: rs, DB: mysql.DB}, gateway.Config{})
	id := f.createVoucher(`{"name":"hot","stock":1000}`)
	v := parseID(t, id)

	cc := rs.Client().(*redis.ClusterClient)
	masterOf := func(key string) string {
		m, err := cc.MasterForKey(ctx, key)
		require.NoError(t, err)
		return m.Options().Addr
	}
	home := rs.PartitionOf(v)
	bucketMaster := func(b int) string { return masterOf(rdb.StreamKey((home + b) % 8)) } // its partition's slot
	reach := map[string]bool{}
	for b := range 8 { // every partition
		reach[bucketMaster(b)] = true
	}
	spread := func(n int) (map[string]int, bool) {
		by := map[string]int{}
		for m := range reach {
			by[m] = 0
		}
		for b := range n {
			by[bucketMaster(b)]++
		}
		lo, hi := n/len(reach), (n+len(reach)-1)/len(reach)
		for _, c := range by {
			if c < lo || c > hi {
				return by, false
			}
		}
		return by, true
	}
	uneven, even := 0, []int{}
	for n := 2; n <= rdb.MaxBuckets; n++ {
		if _, ok := spread(n); !ok && uneven == 0 {
			uneven = n
		} else if ok {
			even = append(even, n)
		}
	}
	require.NotZero(t, uneven, "a count the masters cannot share evenly (8 partitions over 3 masters)")
	var below, above int
	for _, n := range even {
		if n < uneven {
			below = n
		} else if above == 0 {
			above = n
		}
	}
	t.Logf("uneven %d; nearest even %d and %d; partitions on %d masters", uneven, below, above, len(reach))

	res := f.do("PATCH", "/admin/v1/vouchers/"+id, admin, fmt.Sprintf(`{"stock_buckets":%d}`, uneven))
	requireError(t, res, http.StatusBadRequest, "invalid_field")
	msg := res.Body["message"].(string)
	t.Logf("refused: %s", msg)
	require.True(t, strings.HasPrefix(msg, fmt.Sprintf("stock_buckets %d would put ", uneven)), msg)
	by, _ := spread(uneven)
	for m, n := range by {
		if n == 0 {
			require.Contains(t, msg, "none on "+m)
		} else {
			require.Regexp(t, fmt.Sprintf(`\b%d buckets? on %s\b`, n, regexp.QuoteMeta(m)), msg)
		}
	}
	nearest := fmt.Sprintf("the nearest count that would is %d", above)
	if below > 0 {
		nearest = fmt.Sprintf("the nearest counts that would are %d and %d", below, above)
	}
	require.Contains(t, msg, nearest)
	got, err := f.env.DB.Voucher(ctx, v)
	require.NoError(t, err)
	require.Zero(t, got.SplitTo, "nothing asked")

	res = f.do("PATCH", "/admin/v1/vouchers/"+id, admin, fmt.Sprintf(`{"stock_buckets":%d}`, above))
	require.Equal(t, http.StatusOK, res.Status, res.Raw)
	require.EqualValues(t, above, res.Body["split_to"])

	detail := f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
	require.Equal(t, http.StatusOK, detail.Status, detail.Raw)
	want := map[string]any{}
	one, _ := spread(1)
	for m, n := range one {
		want[m] = float64(n)
	}
	require.Equal(t, want, detail.Body["buckets_by_master"], "its one bucket now, every master its partitions reach listed")
}
