// Package testrdb starts the tests of the packages over pkg/rdb on a
// fresh Store: one redis-server of the test's own, or a flushed Redis
// Cluster when the package runs with -redis-cluster
// (testsrv.MainMaybeOnCluster).
package testrdb

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
)

// NewStore is a Store of the given partitions, its scripts loaded, its
// consumer groups made and every partition marked loaded, over a
// redis-server of the test's own, or over cluster (flushed) when it is not
// nil.
func NewStore(t testing.TB, cluster *testsrv.Cluster, partitions int) *rdb.Store {
	t.Helper()
	var c redis.UniversalClient
	if cluster != nil {
		// A test that stopped a node (the hung-master one) may have left
		// the cluster marking it failed for a moment: wait it out.
		wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		require.NoError(t, cluster.WaitOK(wctx))
		cancel()
		cc := cluster.Client()
		require.NoError(t, cc.ForEachMaster(context.Background(), func(ctx context.Context, n *redis.Client) error {
			return n.FlushAll(ctx).Err()
		}))
		c = cc
	} else {
		c = testsrv.NewRedis(t).Client()
	}
	t.Cleanup(func() { c.Close() })
	s, err := rdb.New(c, partitions, "")
	require.NoError(t, err)
	require.NoError(t, s.Load(context.Background()))
	require.NoError(t, s.EnsureGroups(context.Background()))
	// Loaded, as the reaper's restorer marks a partition once it found
	// every voucher on sale there: an unknown voucher is then not found.
	require.NoError(t, s.MarkAllLoaded(context.Background()))
	return s
}

// SeedVoucher puts v on sale in s, a per-user limit of one unless it
// says otherwise, and returns it as put.
func SeedVoucher(t testing.TB, s *rdb.Store, v rdb.Voucher) rdb.Voucher {
	t.Helper()
	if v.PerUserLimit == 0 {
		v.PerUserLimit = 1
	}
	require.NoError(t, s.PutVoucher(context.Background(), v))
	return v
}

// admitters are the tests' Admitters, one a Store (Admitter).
var admitters sync.Map

// Admitter is store s's one Admitter in a test, as a gateway process has
// one: its refills of a dry bucket are one at a time.
func Admitter(s *rdb.Store) *admission.Admitter {
	if a, ok := admitters.Load(s); ok {
		return a.(*admission.Admitter)
	}
	a, _ := admitters.LoadOrStore(s, admission.New(s, nil))
	return a.(*admission.Admitter)
}

// Claim claims one unit of voucher v for user at now (its day in UTC).
func Claim(s *rdb.Store, v int64, user string, now time.Time) (admission.Admission, error) {
	return Admitter(s).Admit(context.Background(), admission.Claim{VoucherID: v, UserID: user, Now: now, Day: order.Day(now, time.UTC)})
}

// Calls is how many times c's redis-server ran the commands named
// (INFO commandstats, names as it gives them: "hgetall", "evalsha").
func Calls(t testing.TB, c redis.UniversalClient, commands ...string) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	var n int64
	for _, cmd := range commands {
		m := regexp.MustCompile(`(?m)^cmdstat_` + regexp.QuoteMeta(cmd) + `:calls=(\d+)`).FindStringSubmatch(info)
		if m != nil {
			c, _ := strconv.ParseInt(m[1], 10, 64)
			n += c
		}
	}
	return n
}

// UsersIn returns n user ids whose claims of a voucher with buckets
// buckets are decided in bucket b (b < 0: any bucket).
func UsersIn(b, buckets, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		u := fmt.Sprintf("user-%d", i)
		if b < 0 || rdb.UserBucket(u, buckets) == b {
			out = append(out, u)
		}
	}
	return out
}

// RequireStock fails t unless Redis holds want units of voucher v.
func RequireStock(t testing.TB, s *rdb.Store, v, want int64) {
	t.Helper()
	got, found, err := s.RemainingStock(context.Background(), v)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, want, got, "remaining stock in Redis")
}

// RequireOneEntryEach fails t unless the streams hold one order of
// voucher v for each id of ids, and no other.
func RequireOneEntryEach(t testing.TB, s *rdb.Store, v int64, ids map[int64]bool) {
	t.Helper()
	var entries int
	for p := range s.Partitions() {
		es, err := s.StreamOrders(context.Background(), p)
		require.NoError(t, err)
		for _, e := range es {
			if e.Order.VoucherID == v {
				require.True(t, ids[e.Order.ID], "entry %s is an admitted order", e.StreamID)
				entries++
			}
		}
	}
	require.Len(t, ids, entries, "one stream entry per admitted order")
}

// ErrOneOf returns whichever of want err is, or err itself (failing
// require.ErrorIs).
func ErrOneOf(err error, want ...error) error {
	for _, w := range want {
		if err == w {
			return w
		}
	}
	return fmt.Errorf("unexpected: %w", err)
}
