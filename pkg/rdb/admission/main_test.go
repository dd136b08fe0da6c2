package admission_test

import (
	"testing"
	"time"

	"github.com/flashsale/flashsale/pkg/internal/testclock"
	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
)

var (
	t0 = testclock.Start()
	d0 = order.Day(t0, time.UTC)
)

// cluster, with -redis-cluster, is the Redis Cluster of three masters
// every test of the package runs against instead of one redis-server:
// make test runs the package both ways.
var cluster *testsrv.Cluster

func TestMain(m *testing.M) { testsrv.MainMaybeOnCluster(m, &cluster) }

func newStore(t testing.TB, partitions int) *rdb.Store {
	return testrdb.NewStore(t, cluster, partitions)
}

func seedVoucher(t testing.TB, s *rdb.Store, v rdb.Voucher) rdb.Voucher {
	return testrdb.SeedVoucher(t, s, v)
}

func claim(s *rdb.Store, v int64, user string, now time.Time) (admission.Admission, error) {
	return testrdb.Claim(s, v, user, now)
}

func usersIn(b, buckets, n int) []string { return testrdb.UsersIn(b, buckets, n) }

func requireStock(t *testing.T, s *rdb.Store, v, want int64) {
	t.Helper()
	testrdb.RequireStock(t, s, v, want)
}
