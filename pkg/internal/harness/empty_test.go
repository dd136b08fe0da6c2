package harness_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/wait"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/reaper"
)

// A single Redis without persistence, killed and restarted mid-sale, comes
// back empty. While MySQL has the voucher on sale, its claims answer 503
// (an outage), not 404; the reaper rebuilds it on its own from MySQL, and
// the sale goes on with the units and the per-user limits MySQL accounts
// for: no oversell, nobody twice.
//
// With Sentinel, the master is restarted before Sentinel notices (its
// down-after-milliseconds is a minute): it stays master, and its replica
// resyncs from it and drops what it had.
func TestARedisThatComesBackEmptyIsRebuiltByTheReaper(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binaries")
	}
	ctx := context.Background()
	t.Run("single", func(t *testing.T) {
		comeBackEmpty(t, startStack(t, ctx, "FLASHSALE_REAPER_RELEASE_INTERVAL=300ms"))
	})
	t.Run("sentinel", func(t *testing.T) {
		s, err := harness.StartStack(ctx, harness.Options{Dir: t.TempDir(), Workers: 1, Partitions: 2, Reaper: true, Sentinel: true,
			Env: []string{"FLASHSALE_REAPER_RELEASE_INTERVAL=300ms"}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinel.Addr})
		defer sc.Close()
		require.NoError(t, sc.Set(ctx, harness.SentinelMaster, "down-after-milliseconds", "60000").Err())
		comeBackEmpty(t, s)
		master, err := sc.GetMasterAddrByName(ctx, harness.SentinelMaster).Result()
		require.NoError(t, err)
		require.Equal(t, s.Redis.Addr, master[0]+":"+master[1], "no failover: the empty master stayed master")
	})
}

func comeBackEmpty(t *testing.T, s *harness.Stack) {
	ctx := context.Background()
	const stock, before = 40, 20
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "empty", Stock: stock, PerUserLimit: 1})
	require.NoError(t, err)
	client := harness.NewClient(s.URL, 4)
	claim := func(user string) (int, string) {
		var body struct {
			Code string `json:"error"`
		}
		status, err := client.Do(ctx, "POST", "/v1/vouchers/"+itoa(v)+"/orders", s.Token(user), nil, &body)
		require.NoError(t, err)
		return status, body.Code
	}
	for i := range before {
		status, code := claim(fmt.Sprintf("b%d", i))
		require.Equal(t, 202, status, code)
	}
	// The admitted orders are in MySQL before Redis goes: this test is
	// about Redis's loss of what MySQL holds, not of the stream.
	testenv.Eventually(t, 60*time.Second, "drained", func() bool { ok, _ := s.Drained(ctx); return ok })

	require.NoError(t, s.Reaper.Signal(syscall.SIGSTOP)) // so the outage can be seen before the rebuild
	require.NoError(t, s.Redis.Kill())
	require.NoError(t, s.Redis.Start())
	testenv.Eventually(t, 30*time.Second, "redis answers", func() bool { return s.RDB.Client().Ping(ctx).Err() == nil })
	for _, user := range []string{"b0", "new0", "new1"} {
		status, code := claim(user)
		require.Equal(t, 503, status, "%s: a voucher on sale that Redis lost is an outage, not unknown (%s)", user, code)
		require.Equal(t, "unavailable", code)
	}

	require.NoError(t, s.Reaper.Signal(syscall.SIGCONT))
	after := 0
	testenv.Eventually(t, 60*time.Second, "the reaper rebuilt the voucher", func() bool {
		status, _ := claim(fmt.Sprintf("a%d", after))
		if status == 202 {
			after++
		}
		return after > 0
	})
	status, code := claim("b0")
	require.Equal(t, 409, status)
	require.Equal(t, "user_limit", code, "b0's order is in MySQL: the rebuilt Redis counts it")
	for i := after; ; i++ {
		status, code := claim(fmt.Sprintf("a%d", i))
		if status == 409 {
			require.Equal(t, "sold_out", code)
			break
		}
		require.Equal(t, 202, status, code)
		after++
		require.LessOrEqual(t, after, stock, "oversold")
	}
	require.Equal(t, stock-before, after, "exactly the units MySQL had left were sold after the rebuild")

	if err := wait.Until(ctx, 60*time.Second, "the streams drained", func() (bool, string) { return s.Drained(ctx) }); err != nil {
		g, gerr := s.RDB.Client().XInfoGroups(ctx, rdb.StreamKey(s.RDB.PartitionOf(v))).Result()
		c, cerr := s.RDB.Client().XInfoConsumers(ctx, rdb.StreamKey(s.RDB.PartitionOf(v)), rdb.DefaultGroup).Result()
		t.Fatalf("%v; groups %+v %v; consumers %+v %v", err, g, gerr, c, cerr)
	}
	live, err := s.DB.LiveOrders(ctx, v)
	require.NoError(t, err)
	require.Len(t, live, stock)
	users := map[string]bool{}
	for _, o := range live {
		require.False(t, users[o.UserID], "%s holds two orders", o.UserID)
		users[o.UserID] = true
	}
	checks, err := reaper.Reconcile(ctx, s.RDB, s.DB, time.Now(), false)
	require.NoError(t, err)
	for _, c := range checks {
		require.Empty(t, c.Differences, "voucher %d", c.VoucherID)
	}
}
