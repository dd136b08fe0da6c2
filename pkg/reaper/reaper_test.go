package reaper_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/persist"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
	"github.com/flashsale/flashsale/pkg/reaper"
	"github.com/flashsale/flashsale/pkg/settle"
	"github.com/flashsale/flashsale/pkg/worker"
)

func TestMain(m *testing.M) { testsrv.Main(m) }

func newReaper(t *testing.T, e *testenv.Env, name string, now func() time.Time, mut ...func(*reaper.Config)) *reaper.Reaper {
	t.Helper()
	cfg := reaper.Config{Config: worker.Config{Consumer: name, TakeoverMinIdle: 5 * time.Millisecond, Block: time.Millisecond, RetryBackoff: 10 * time.Millisecond},
		MaxDeliveries: 3, ConsumerGoneAfter: time.Hour}
	for _, m := range mut {
		m(&cfg)
	}
	r, err := reaper.New(cfg, e.RDB, e.DB, zaptest.NewLogger(t), reaper.WithClock(now))
	require.NoError(t, err)
	return r
}

func admit(t *testing.T, e *testenv.Env, voucher int64, users ...string) []int64 {
	t.Helper()
	var ids []int64
	now := time.Now()
	for _, u := range users {
		a, err := testrdb.Admitter(e.RDB).Admit(context.Background(), admission.Claim{VoucherID: voucher, UserID: u, Now: now, Day: order.Day(now, time.UTC)})
		require.NoError(t, err)
		ids = append(ids, a.OrderID)
	}
	return ids
}

// raceReapers runs one round of n reapers at once, their clocks at now, and
// returns the sum of their counts of one thing.
func raceReapers(t *testing.T, e *testenv.Env, n int, now time.Time, count func(reaper.Results) int, mut ...func(*reaper.Config)) int {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for i := range n {
		r := newReaper(t, e, fmt.Sprintf("reaper-%d", i), func() time.Time { return now }, mut...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := r.RunOnce(context.Background())
			require.NoError(t, err)
			mu.Lock()
			total += count(p)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return total
}

func users(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// readAndDie reads entries as consumer and never acknowledges them: a
// worker killed right after XREADGROUP.
func readAndDie(t *testing.T, e *testenv.Env, voucher int64, consumer string) []rdb.StreamOrder {
	t.Helper()
	entries, err := e.RDB.ReadGroup(context.Background(), e.RDB.PartitionOf(voucher), consumer, ">", 1000, 10*time.Millisecond)
	require.NoError(t, err)
	return entries
}

func persistVoucher(t *testing.T, e *testenv.Env, voucher int64) {
	t.Helper()
	w := persist.NewOrders(persist.Config{Consumer: "helper"}, e.RDB, e.DB, zaptest.NewLogger(t), nil, nil)
	require.NoError(t, w.Handle(context.Background(), readAndDie(t, e, voucher, "helper")))
}

func redisStock(t *testing.T, e *testenv.Env, v int64) int64 {
	t.Helper()
	n, _, err := e.RDB.RemainingStock(context.Background(), v)
	require.NoError(t, err)
	return n
}

func backlog(t *testing.T, e *testenv.Env, v int64) rdb.Backlog {
	t.Helper()
	b, err := e.RDB.PartitionBacklog(context.Background(), e.RDB.PartitionOf(v))
	require.NoError(t, err)
	return b
}

func TestReclaimsWhatACrashedWorkerLeftAndRemovesIt(t *testing.T) {
	e := testenv.New(t, 2)
	ctx := context.Background()
	v := e.SeedVoucher(t, db.Voucher{Stock: 300}, -1)
	admit(t, e, v.ID, users("u", 250)...)
	require.Len(t, readAndDie(t, e, v.ID, "worker-gone"), 250)

	r := newReaper(t, e, "reaper-1", time.Now, func(c *reaper.Config) { c.BatchSize = 100; c.ConsumerGoneAfter = 10 * time.Millisecond })
	var takenOver, removed int
	testenv.Eventually(t, 5*time.Second, "entries idle long enough to claim", func() bool {
		p, err := r.RunOnce(ctx)
		require.NoError(t, err)
		takenOver += p.Rescuer.TakenOver
		removed += p.Consumers.ConsumersRemoved
		return takenOver == 250
	})
	require.Equal(t, int64(250), e.Count(t, "SELECT COUNT(*) FROM orders WHERE status = 'created'"))
	require.Equal(t, int64(50), e.Count(t, "SELECT stock FROM vouchers WHERE id = ?", v.ID))
	require.Equal(t, rdb.Backlog{Partition: e.RDB.PartitionOf(v.ID)}, backlog(t, e, v.ID))

	// The dead worker had nothing pending any more: it is gone from the group.
	p := e.RDB.PartitionOf(v.ID)
	consumers, err := e.RDB.Client().XInfoConsumers(ctx, rdb.StreamKey(p), rdb.DefaultGroup).Result()
	require.NoError(t, err)
	for _, c := range consumers {
		require.NotEqual(t, "worker-gone", c.Name)
	}
	require.GreaterOrEqual(t, removed, 1)
}

func TestEntriesDeliveredTooOftenAreDeadLetteredOnce(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	v := e.SeedVoucher(t, db.Voucher{Stock: 10, PerUserDailyLimit: 1}, -1)
	// MySQL will not take the first order as created (a CHECK someone
	// added), though it takes other writes, its failure record included.
	require.NoError(t, e.DB.DB().Exec("ALTER TABLE orders ADD CONSTRAINT poison CHECK (NOT (user_id = 'poisoned' AND status = 'created'))").Error)
	ids := admit(t, e, v.ID, "poisoned", "persisted")
	entries := readAndDie(t, e, v.ID, "w")
	// The second order was committed by its worker, which died before acking.
	_, err := e.DB.PersistBatch(ctx, []order.Order{entries[1].Order})
	require.NoError(t, err)
	// Both were delivered over and over (each XCLAIM counts one delivery).
	for range 3 {
		require.NoError(t, e.RDB.Client().XClaim(ctx, &redis.XClaimArgs{Stream: rdb.StreamKey(0), Group: rdb.DefaultGroup,
			Consumer: "w", Messages: []string{entries[0].StreamID, entries[1].StreamID}}).Err())
	}

	r := newReaper(t, e, "reaper-1", time.Now)
	var round reaper.RescuerResult
	testenv.Eventually(t, 5*time.Second, "dead letter", func() bool {
		p, err := r.RunOnce(ctx)
		require.NoError(t, err)
		round.DeadLettered += p.Rescuer.DeadLettered
		round.TakenOver += p.Rescuer.TakenOver
		return backlog(t, e, v.ID).Pending == 0
	})
	// The persisted one's last attempt finds it persisted: only acknowledged.
	require.Equal(t, 1, round.DeadLettered)
	require.Equal(t, 1, round.TakenOver)

	poisoned, err := e.DB.Order(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, "failed", poisoned.Status)
	require.Equal(t, db.ReasonDeadLetter, poisoned.Reason)
	kept, err := e.DB.Order(ctx, ids[1])
	require.NoError(t, err)
	require.Equal(t, "created", kept.Status, "a persisted order is not failed after the fact")

	dead, err := e.RDB.Client().XRange(ctx, rdb.DeadKey(0), "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Contains(t, dead[0].Values["reason"], "delivered 5 times; last error:")
	require.Contains(t, dead[0].Values["reason"], "poison")
	// Its reservation came back once: 10 - 2 admitted + 1 released.
	require.EqualValues(t, 9, redisStock(t, e, v.ID))
	n, err := e.RDB.UserCount(ctx, v.ID, "poisoned")
	require.NoError(t, err)
	require.Zero(t, n)
	require.Zero(t, e.Count(t, "SELECT COUNT(*) FROM releases WHERE redis_released_at IS NULL"))

	_, err = r.RunOnce(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 9, redisStock(t, e, v.ID), "a second round releases nothing")
}

func TestUnpaidOrdersAreCancelledAndReleasedExactlyOnce(t *testing.T) {
	e := testenv.New(t, 2)
	ctx := context.Background()
	v := e.SeedVoucher(t, db.Voucher{Stock: 10, PerUserLimit: 1, PerUserDailyLimit: 1, PaymentTimeoutSeconds: 60}, -1)
	ids := admit(t, e, v.ID, users("u", 6)...)
	persistVoucher(t, e, v.ID)
	now := time.Now().UTC()
	for _, i := range []int{0, 1} {
		_, err := e.DB.PayOrder(ctx, ids[i], fmt.Sprintf("u%d", i), now)
		require.NoError(t, err)
	}
	later := now.Add(2 * time.Minute)

	// A crash between the two halves: MySQL cancelled u2's order and took
	// the unit back, Redis has not heard of it yet.
	rs, err := e.DB.CancelExpired(ctx, later, 1)
	require.NoError(t, err)
	require.Len(t, rs, 1)
	// And for u3's order, Redis was released but MySQL did not mark it.
	rs3, err := e.DB.CancelExpired(ctx, later, 1)
	require.NoError(t, err)
	_, err = e.RDB.Release(ctx, rs3[0].Order(), later)
	require.NoError(t, err)

	r := newReaper(t, e, "reaper-1", func() time.Time { return later })
	round, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, round.Expirer.Cancelled)
	require.Equal(t, 4, round.Releaser.ReleasedToRedis)

	require.Equal(t, int64(4), e.Count(t, "SELECT COUNT(*) FROM orders WHERE status = 'cancelled'"))
	require.Equal(t, int64(2), e.Count(t, "SELECT COUNT(*) FROM orders WHERE status = 'paid'"))
	require.Equal(t, int64(8), e.Count(t, "SELECT stock FROM vouchers WHERE id = ?", v.ID))
	require.EqualValues(t, 8, redisStock(t, e, v.ID), "Redis and MySQL agree: each unit came back once")
	for i := 2; i < 6; i++ {
		n, err := e.RDB.UserCount(ctx, v.ID, fmt.Sprintf("u%d", i))
		require.NoError(t, err)
		require.Zero(t, n, "u%d may buy again", i)
	}
	// The same users can buy again today: their daily count came back too.
	admit(t, e, v.ID, "u2")

	again, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, reaper.Results{}, again)
	_, err = e.DB.PayOrder(ctx, ids[3], "u3", later)
	require.ErrorIs(t, err, db.ErrPaymentExpired)
}

func TestConcurrentReapersCancelEachOrderOnce(t *testing.T) {
	e := testenv.New(t, 4)
	v := e.SeedVoucher(t, db.Voucher{Stock: 400, PaymentTimeoutSeconds: 1}, -1)
	admit(t, e, v.ID, users("u", 300)...)
	persistVoucher(t, e, v.ID)
	total := raceReapers(t, e, 3, time.Now().Add(time.Minute), func(r reaper.Results) int { return r.Expirer.Cancelled },
		func(c *reaper.Config) { c.BatchSize = 25 })
	require.Equal(t, 300, total)
	require.Equal(t, int64(400), e.Count(t, "SELECT stock FROM vouchers WHERE id = ?", v.ID))
	require.EqualValues(t, 400, redisStock(t, e, v.ID))
}

func TestReconcileRepairsRedisFromMySQLAndTheStreams(t *testing.T) {
	e := testenv.New(t, 2)
	ctx := context.Background()
	v := e.SeedVoucher(t, db.Voucher{Stock: 20, PerUserLimit: 2, PerUserDailyLimit: 1}, -1)
	admit(t, e, v.ID, users("p", 5)...)
	persistVoucher(t, e, v.ID)
	admit(t, e, v.ID, users("f", 3)...) // in flight: admitted, not yet persisted

	checks, err := reaper.Reconcile(ctx, e.RDB, e.DB, time.Now(), false)
	require.NoError(t, err)
	require.Len(t, checks, 1)
	require.Equal(t, 3, checks[0].InFlight)
	require.Empty(t, checks[0].Differences, "a healthy pipeline reconciles clean")

	// Redis drifts: stock wrong, a user's count gone.
	c := e.RDB.Client()
	key := fmt.Sprintf("flashsale:{p%d}:v:%d", e.RDB.PartitionOf(v.ID), v.ID)
	require.NoError(t, c.HSet(ctx, key, "stock", 999).Err())
	require.NoError(t, c.HDel(ctx, key, "u:p0").Err())
	checks, err = reaper.Reconcile(ctx, e.RDB, e.DB, time.Now(), false)
	require.NoError(t, err)
	require.Contains(t, checks[0].Differences, reaper.Difference{What: "stock", Redis: 999, Want: 12})
	require.Contains(t, checks[0].Differences, reaper.Difference{What: "user p0", Redis: 0, Want: 1})
	var out strings.Builder
	reaper.PrintChecks(&out, checks, 20)
	require.Contains(t, out.String(), "user p0")

	checks, err = reaper.Reconcile(ctx, e.RDB, e.DB, time.Now(), true)
	require.NoError(t, err)
	require.True(t, checks[0].Repaired)
	checks, err = reaper.Reconcile(ctx, e.RDB, e.DB, time.Now(), false)
	require.NoError(t, err)
	require.Empty(t, checks[0].Differences)
	require.EqualValues(t, 12, redisStock(t, e, v.ID))
}

func TestReconcileRebuildsAFlushedRedis(t *testing.T) {
	e := testenv.New(t, 2)
	ctx := context.Background()
	v := e.SeedVoucher(t, db.Voucher{Stock: 5, PerUserLimit: 1, PaymentTimeoutSeconds: 60}, -1)
	admit(t, e, v.ID, users("u", 4)...)
	persistVoucher(t, e, v.ID)
	// One order is cancelled; its release is still owed to Redis.
	_, err := e.DB.CancelExpired(ctx, time.Now().Add(time.Hour), 1)
	require.NoError(t, err)

	require.NoError(t, e.RDB.Client().FlushAll(ctx).Err()) // Redis lost everything
	checks, err := reaper.Reconcile(ctx, e.RDB, e.DB, time.Now(), true)
	require.NoError(t, err)
	require.True(t, checks[0].Repaired)
	require.EqualValues(t, 2, redisStock(t, e, v.ID))

	// Selling resumes without overselling and without selling twice to a holder.
	now := time.Now()
	claim := func(u string) error {
		_, err := testrdb.Admitter(e.RDB).Admit(ctx, admission.Claim{VoucherID: v.ID, UserID: u, Now: now, Day: order.Day(now, time.UTC)})
		return err
	}
	held := 0
	for i := range 4 {
		if err := claim(fmt.Sprintf("u%d", i)); err == nil {
			held++
		} else {
			require.ErrorIs(t, err, rdb.ErrUserLimit)
		}
	}
	require.Equal(t, 1, held, "only the cancelled order's user may buy again")
	require.NoError(t, claim("new"))
	require.ErrorIs(t, claim("another"), rdb.ErrSoldOut)
	// The owed release was settled by the repair; the reaper releases nothing twice.
	r := newReaper(t, e, "reaper-1", time.Now)
	round, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, round.Releaser.ReleasedToRedis)
	require.EqualValues(t, 0, redisStock(t, e, v.ID))
}

// Each service keeps its own interval: with the rescuer all but idle, the
// expirer and the releaser still cancel and release on theirs.
func TestServicesRunOnTheirOwnIntervals(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	v := e.SeedVoucher(t, db.Voucher{Stock: 5}, -1)
	admit(t, e, v.ID, users("u", 3)...)
	persistVoucher(t, e, v.ID)
	var clock sync.Mutex
	now := time.Now()
	r := newReaper(t, e, "reaper-1", func() time.Time { clock.Lock(); defer clock.Unlock(); return now }, func(c *reaper.Config) {
		c.Interval = time.Hour
		c.ExpireInterval, c.ReleaseInterval = 10*time.Millisecond, 10*time.Millisecond
	})
	runCtx, cancel := context.WithCancel(ctx)
	var runErr error
	stopped := make(chan struct{})
	go func() { runErr = r.Run(runCtx); close(stopped) }()
	t.Cleanup(func() { cancel(); <-stopped })

	// The orders expire only now, after every service's first round.
	clock.Lock()
	now = now.Add(time.Hour)
	clock.Unlock()
	testenv.Eventually(t, 10*time.Second, "cancelled and released", func() bool {
		stock, _, err := e.RDB.RemainingStock(ctx, v.ID)
		return err == nil && stock == 5 && e.Count(t, "SELECT COUNT(*) FROM orders WHERE status = 'cancelled'") == 3
	})
	cancel()
	<-stopped
	require.NoError(t, runErr)
}

// Orders of several units: MySQL takes an order's units all or nothing and
// counts the per-user limit in units; a failed or expired order gives all
// its units back, once, in both stores.
func TestOrdersOfSeveralUnitsAreTakenAndReleasedWhole(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	// Redis admits 14 units where MySQL has 10 (the stores drifted).
	v := e.SeedVoucher(t, db.Voucher{Stock: 10, StockTotal: 14, PerUserLimit: 5}, 14)
	now := time.Now()
	for _, c := range []struct {
		user string
		n    int64
	}{{"u1", 3}, {"u2", 4}, {"u3", 4}, {"u4", 3}} {
		_, err := testrdb.Admitter(e.RDB).Admit(ctx, admission.Claim{VoucherID: v.ID, UserID: c.user, Now: now, Day: order.Day(now, time.UTC), Quantity: c.n})
		require.NoError(t, err)
	}
	persistVoucher(t, e, v.ID)
	// 3 + 4 fit, u3's 4 do not (7 + 4 > 10), u4's 3 do.
	require.EqualValues(t, 3, e.Count(t, "SELECT COUNT(*) FROM orders WHERE status = 'created'"))
	require.EqualValues(t, 10, e.Count(t, "SELECT SUM(quantity) FROM orders WHERE status = 'created'"))
	require.EqualValues(t, 1, e.Count(t, "SELECT COUNT(*) FROM orders WHERE user_id = ? AND status = ? AND reason = ?", "u3", "failed", db.ReasonOutOfStock))
	require.Zero(t, e.Count(t, "SELECT stock FROM vouchers WHERE id = ?", v.ID))
	require.EqualValues(t, 4, redisStock(t, e, v.ID), "u3's 4 units came back to Redis")
	n, err := e.RDB.UserCount(ctx, v.ID, "u3")
	require.NoError(t, err)
	require.Zero(t, n)

	// Unpaid, all expire: every unit goes back, once.
	r := newReaper(t, e, "reaper-1", func() time.Time { return now.Add(time.Hour) })
	for range 2 {
		_, err := r.RunOnce(ctx)
		require.NoError(t, err)
	}
	require.EqualValues(t, 10, e.Count(t, "SELECT stock FROM vouchers WHERE id = ?", v.ID))
	require.EqualValues(t, 14, redisStock(t, e, v.ID))
	require.EqualValues(t, 14, e.Count(t, "SELECT SUM(quantity) FROM releases WHERE redis_released_at IS NOT NULL"))
	for _, u := range []string{"u1", "u2", "u4"} {
		n, err := e.RDB.UserCount(ctx, v.ID, u)
		require.NoError(t, err)
		require.Zero(t, n, u)
	}
}

// reconcile counts units: orders of several units, persisted and in
// flight, agree with Redis, and a flushed Redis is rebuilt in units.
func TestReconcileCountsUnits(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	v := e.SeedVoucher(t, db.Voucher{Stock: 20, PerUserLimit: 6, PerUserDailyLimit: 5}, -1)
	now := time.Now()
	claim := func(user string, n int64) {
		t.Helper()
		_, err := testrdb.Admitter(e.RDB).Admit(ctx, admission.Claim{VoucherID: v.ID, UserID: user, Now: now, Day: order.Day(now, time.UTC), Quantity: n})
		require.NoError(t, err)
	}
	claim("u1", 3)
	claim("u2", 2)
	persistVoucher(t, e, v.ID)
	claim("u1", 2) // in flight
	checks, err := reaper.Reconcile(ctx, e.RDB, e.DB, now, false)
	require.NoError(t, err)
	require.Len(t, checks, 1)
	require.Empty(t, checks[0].Differences)
	require.Equal(t, 1, checks[0].InFlight)

	// Redis loses the voucher's keys (not the stream).
	keys, err := e.RDB.Client().Keys(ctx, "flashsale:{p0}:v:*").Result()
	require.NoError(t, err)
	require.NoError(t, e.RDB.Client().Del(ctx, keys...).Err())
	checks, err = reaper.Reconcile(ctx, e.RDB, e.DB, now, true)
	require.NoError(t, err)
	require.True(t, checks[0].Repaired)
	require.EqualValues(t, 13, redisStock(t, e, v.ID), "20 - 3 - 2 - 2 in flight")
	n, err := e.RDB.UserCount(ctx, v.ID, "u1")
	require.NoError(t, err)
	require.EqualValues(t, 5, n)
	_, err = testrdb.Admitter(e.RDB).Admit(ctx, admission.Claim{VoucherID: v.ID, UserID: "u1", Now: now, Day: order.Day(now, time.UTC), Quantity: 1})
	require.ErrorIs(t, err, rdb.ErrDailyLimit, "u1's 5 units today are rebuilt")
}

// A live worker on a quiet partition is never removed from the group. On
// Redis 7.0 a read that returns nothing does not reset a consumer's idle
// time, so a running worker looked gone after FLASHSALE_CONSUMER_GONE_AFTER
// and was removed ("consumer removed ... worker-1" while it ran). Its
// liveness key keeps it now; once it stops and the key lapses, it goes.
func TestALiveWorkerIdlePastTheThresholdIsNotRemoved(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	w, err := worker.New(worker.Config{Consumer: "worker-1", Block: 50 * time.Millisecond}, e.RDB, e.DB, zaptest.NewLogger(t))
	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	idleOf := func() (time.Duration, bool) {
		consumers, err := e.RDB.Client().XInfoConsumers(ctx, rdb.StreamKey(0), rdb.DefaultGroup).Result()
		require.NoError(t, err)
		for _, c := range consumers {
			if c.Name == "worker-1" {
				return c.Idle, true
			}
		}
		return 0, false
	}
	// A threshold shorter than the worker's 50 ms blocking read: it looks
	// idle past it on every Redis (on 7.0 its idle time only grows while
	// it reads; on 7.2 and later it is the time since its read began).
	const goneAfter = 10 * time.Millisecond
	testenv.Eventually(t, 10*time.Second, "the worker read and looks idle", func() bool {
		idle, ok := idleOf()
		return ok && idle >= goneAfter
	})
	r := newReaper(t, e, "reaper-1", time.Now, func(c *reaper.Config) { c.ConsumerGoneAfter = goneAfter; c.TakeoverMinIdle = 4 * time.Millisecond })
	round, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, round.Consumers.ConsumersRemoved)
	_, ok := idleOf()
	require.True(t, ok, "the live worker is still in the group")

	// Stopped, and its liveness key lapsed (deleted here rather than
	// waited for): it is gone, and removed.
	stop()
	require.NoError(t, <-done)
	require.NoError(t, e.RDB.Client().Del(ctx, rdb.AliveKey(0, "worker-1")).Err())
	testenv.Eventually(t, 10*time.Second, "the stopped worker removed", func() bool {
		_, err := r.RunOnce(ctx)
		require.NoError(t, err)
		_, ok := idleOf()
		return !ok
	})
}

// Vouchers written by a version without the rooms' index (or an index
// Redis lost) are indexed by the restorer's next round: until then the
// gateways ask Redis about that partition's ids; after it, they answer
// from the index.
func TestTheRestorerCompletesTheRoomsIndex(t *testing.T) {
	e := testenv.New(t, 2)
	ctx := context.Background()
	with := e.SeedVoucher(t, db.Voucher{Stock: 5, PerUserLimit: 1, WaitingRoom: "10:0:30000"}, -1)
	without := e.SeedVoucher(t, db.Voucher{Stock: 5, PerUserLimit: 1}, -1)
	for p := range 2 {
		require.NoError(t, e.RDB.Client().Del(ctx, rdb.RoomsKey(p)).Err())
	}
	x, err := e.RDB.RoomIndex(ctx, nil)
	require.NoError(t, err)
	_, _, known := x.Of(with.ID)
	require.False(t, known)

	r := newReaper(t, e, "reaper-1", time.Now)
	_, err = r.RunOnce(ctx)
	require.NoError(t, err)
	x, err = e.RDB.RoomIndex(ctx, nil)
	require.NoError(t, err)
	room, exists, known := x.Of(with.ID)
	require.Equal(t, []bool{true, true, true}, []bool{room, exists, known}, "the voucher with a room")
	room, exists, known = x.Of(without.ID)
	require.Equal(t, []bool{false, true, true}, []bool{room, exists, known}, "the voucher without")
	_, exists, known = x.Of(without.ID + 100)
	require.Equal(t, []bool{false, true}, []bool{exists, known}, "no voucher")
}

// The rooms' index holds what the live vouchers hold: a voucher whose
// keys Redis dropped (its sale long over) leaves it at the trimmer's next
// round; one that lives stays.
func TestTheTrimmerPrunesTheRoomsIndex(t *testing.T) {
	e := testenv.New(t, 2)
	ctx := context.Background()
	gone := e.SeedVoucher(t, db.Voucher{Stock: 5, PerUserLimit: 1, WaitingRoom: "10:0:30000"}, -1)
	live := e.SeedVoucher(t, db.Voucher{Stock: 5, PerUserLimit: 1}, -1)
	require.NoError(t, e.RDB.Client().Del(ctx, e.RDB.VoucherKey(gone.ID)).Err()) // expired
	r := newReaper(t, e, "reaper-1", time.Now)
	round, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, round.Trimmer.RoomsPruned)
	x, err := e.RDB.RoomIndex(ctx, nil)
	require.NoError(t, err)
	_, exists, known := x.Of(gone.ID)
	require.Equal(t, []bool{false, true}, []bool{exists, known}, "the voucher gone: not named")
	_, exists, _ = x.Of(live.ID)
	require.True(t, exists, "the live voucher: named")
}

// A voucher just created is in MySQL before it is in Redis; a restorer
// round between the two finds it lost. If the gateway creates it in Redis
// and claims are admitted after the restorer read what to write, the
// restorer's state counts none of them: it writes only the buckets Redis
// still lacks, and the claims stand (before, the rewrite gave their units
// out again and forgot their users).
func TestTheRestorerNeverUndoesClaimsOfAVoucherCreatedMeanwhile(t *testing.T) {
	for _, buckets := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d buckets", buckets), func(t *testing.T) {
			e := testenv.New(t, 2)
			ctx := context.Background()
			now := time.Now().UTC().Truncate(time.Millisecond)
			v := db.Voucher{Name: "just created", Stock: 5, StockTotal: 5, PerUserLimit: 1, PaymentTimeoutSeconds: 60, StockBuckets: buckets}
			ch, err := e.DB.CreateVoucher(ctx, &v, nil, db.ActorAdmin, now)
			require.NoError(t, err)
			require.NoError(t, e.RDB.Client().FlushAll(ctx).Err()) // a fresh Redis: no partition marked loaded
			require.NoError(t, e.RDB.EnsureGroups(ctx))

			hooked := 0
			hook := func(id int64) {
				if id != v.ID {
					return
				}
				hooked++
				// The gateway's creation, then three claims.
				_, err := settle.Changes(ctx, e.RDB, e.DB, []db.VoucherChange{ch}, now)
				require.NoError(t, err)
				admit(t, e, v.ID, users("u", 3)...)
			}
			// The restorer alone: the releaser would apply the owed creation first.
			round := restoreWithHook(t, e, hook)
			require.Equal(t, 1, hooked, "the restorer did not find the voucher lost: the test has no power")
			require.Zero(t, round.Restorer.Restored, "the restorer wrote over a voucher a gateway had created")

			require.EqualValues(t, 2, redisStock(t, e, v.ID), "units of admitted claims given out again")
			for _, u := range users("u", 3) {
				_, err := testrdb.Admitter(e.RDB).Admit(ctx, admission.Claim{VoucherID: v.ID, UserID: u, Now: time.Now(), Day: order.Day(time.Now(), time.UTC)})
				require.ErrorIs(t, err, rdb.ErrUserLimit, "user %s's claim forgotten", u)
			}
			unloaded, err := e.RDB.Unloaded(ctx)
			require.NoError(t, err)
			require.Empty(t, unloaded, "the partitions stay unmarked")
		})
	}
}

// A voucher whose creation is under way when the restorer reads (its
// buckets written but bucket 0, which a creation writes last) is no loss:
// the round waits for the creation, marks the partitions loaded and says
// nothing (it had logged "redis lost some buckets" and left them unmarked
// for a round). Bucket 0 missing from a voucher created long ago is a
// loss: its partitions stay unmarked and nothing is written.
func TestTheRestorerWaitsForACreationUnderWay(t *testing.T) {
	for _, tc := range []struct {
		name     string
		age      time.Duration
		underWay bool
	}{{"just created", 0, true}, {"created long ago", 2 * time.Minute, false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := testenv.New(t, 2)
			ctx := context.Background()
			created := time.Now().UTC().Add(-tc.age).Truncate(time.Millisecond)
			v := db.Voucher{Name: "being created", Stock: 6, StockTotal: 6, PerUserLimit: 1, PaymentTimeoutSeconds: 60, StockBuckets: 3, CreatedAt: created}
			ch, err := e.DB.CreateVoucher(ctx, &v, nil, db.ActorAdmin, created)
			require.NoError(t, err)
			require.NoError(t, e.RDB.Client().FlushAll(ctx).Err()) // a fresh Redis: no partition marked loaded
			require.NoError(t, e.RDB.EnsureGroups(ctx))
			_, err = settle.Changes(ctx, e.RDB, e.DB, []db.VoucherChange{ch}, created)
			require.NoError(t, err)
			// The creation has written buckets 2 and 1, not yet bucket 0.
			zero := e.RDB.VoucherKey(v.ID)
			dump, err := e.RDB.Client().Dump(ctx, zero).Result()
			require.NoError(t, err)
			require.NoError(t, e.RDB.Client().Del(ctx, zero).Err())

			waited := 0
			finish := func(id int64) { // the gateway writes bucket 0
				if id != v.ID {
					return
				}
				waited++
				require.NoError(t, e.RDB.Client().Restore(ctx, zero, 0, dump).Err())
			}
			round := restoreWith(t, e, reaper.WithCreationHook(finish))
			require.Zero(t, round.Restorer.Restored, "nothing rebuilt")
			unloaded, err := e.RDB.Unloaded(ctx)
			require.NoError(t, err)
			present, hasZero, err := e.RDB.PresentBuckets(ctx, v.ID, 3)
			require.NoError(t, err)
			if tc.underWay {
				require.Empty(t, unloaded, "every partition marked loaded in this round")
				require.Equal(t, 1, waited, "the restorer waited for the creation")
				require.Equal(t, 3, present)
				return
			}
			require.Zero(t, waited, "an old voucher's missing bucket 0 is no creation")
			require.NotEmpty(t, unloaded, "the voucher's partitions stay unmarked for an operator's repair")
			require.Equal(t, 2, present)
			require.False(t, hasZero, "nothing written over a loss")
		})
	}
}

// Redis lost a voucher (its hash, not its stream) with orders in flight. A
// worker persists them while the restorer reads: after the restorer read
// the streams, before it reads MySQL. The stock it writes is MySQL's as of
// the orders it reads, which count them once: it is not the stock the
// round's list of vouchers read before they were persisted.
func TestTheRestorerReadsMySQLsStockWithItsOrders(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	v := e.SeedVoucher(t, db.Voucher{Stock: 5, PerUserLimit: 1, PaymentTimeoutSeconds: 60}, -1)
	admit(t, e, v.ID, users("u", 3)...)
	// Redis loses every key but the stream: the voucher, the loaded mark.
	c := e.RDB.Client()
	keys, err := c.Keys(ctx, "*").Result()
	require.NoError(t, err)
	for _, k := range keys {
		if typ, err := c.Type(ctx, k).Result(); err == nil && typ != "stream" {
			require.NoError(t, c.Del(ctx, k).Err())
		}
	}

	hooked := 0
	hook := func(id int64) {
		if id == v.ID {
			hooked++
			persistVoucher(t, e, v.ID)
		}
	}
	round := restoreWithHook(t, e, hook)
	require.Equal(t, 1, hooked, "the restorer did not find the voucher lost: the test has no power")
	require.Equal(t, 1, round.Restorer.Restored)
	live, err := e.DB.LiveOrders(ctx, v.ID)
	require.NoError(t, err)
	require.Len(t, live, 3, "the orders in flight were not persisted during the round")
	require.EqualValues(t, 2, redisStock(t, e, v.ID), "the persisted orders' units given out again")
	checks, err := reaper.Reconcile(ctx, e.RDB, e.DB, time.Now(), false)
	require.NoError(t, err)
	require.Empty(t, checks[0].Differences)
}

// restoreWithHook runs one round of a reaper's restorer alone, hook run
// when it has found a voucher lost and read the streams.
func restoreWithHook(t *testing.T, e *testenv.Env, hook func(v int64)) reaper.Results {
	t.Helper()
	return restoreWith(t, e, reaper.WithRestoreHook(hook))
}

// restoreWith runs one restorer pass of a reaper made with opts.
func restoreWith(t *testing.T, e *testenv.Env, opts ...reaper.Option) reaper.Results {
	t.Helper()
	cfg := reaper.Config{Config: worker.Config{Consumer: "reaper-1", Block: time.Millisecond}, MaxDeliveries: 3, ConsumerGoneAfter: time.Hour}
	r, err := reaper.New(cfg, e.RDB, e.DB, zaptest.NewLogger(t), opts...)
	require.NoError(t, err)
	round, err := r.RunOnly(context.Background(), "restorer")
	require.NoError(t, err)
	return round
}
