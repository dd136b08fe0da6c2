package reaper_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
	"github.com/flashsale/flashsale/pkg/rdb/split"
	"github.com/flashsale/flashsale/pkg/reaper"
	"github.com/flashsale/flashsale/pkg/worker"
)

// A voucher created with one bucket that turns hot is split by itself
// while it sells: the detector marks it and asks for the split, the
// splitter does it in the same round and records it in MySQL; the sale
// then sells out over the new buckets. With a worker persisting, MySQL's
// orders are the admissions, no user holds more than the limit, a retry
// under a key made before the split gets its first order, and reconcile
// finds Redis and MySQL agree.
func TestAHotVoucherIsSplitByItselfWhileItSells(t *testing.T) {
	e := testenv.New(t, 8)
	ctx := context.Background()
	const stock, limit, at = 1500, 2, 30
	start := time.Now().Truncate(time.Second).Add(-time.Minute)
	ends := start.Add(time.Hour)
	v := e.SeedVoucher(t, db.Voucher{Stock: stock, PerUserLimit: limit, EndsAt: &ends, PaymentTimeoutSeconds: 3600}, -1)
	now := start
	core, logs := observer.New(zap.InfoLevel)
	r, err := reaper.New(reaper.Config{Config: worker.Config{Consumer: "splitter"}, HotSplitAt: at, HotSplitFor: 2 * time.Second},
		e.RDB, e.DB, zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core)), reaper.WithClock(func() time.Time { return now }),
		reaper.WithSplitTarget(func(context.Context, int64, int) (int, error) { return 4, nil }))
	require.NoError(t, err)
	w, err := worker.New(worker.Config{Consumer: "worker-1", Block: 50 * time.Millisecond}, e.RDB, e.DB, zaptest.NewLogger(t))
	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stop(); require.NoError(t, <-done) }()

	first := map[string]int64{} // user -> the order of its key "a"
	held := map[string]int{}
	admitted := 0
	claim := func(u, key string, sec time.Time) error {
		a, err := testrdb.Admitter(e.RDB).Admit(ctx, admission.Claim{VoucherID: v.ID, UserID: u, IdempotencyKey: key, IdempotencyTTL: time.Hour,
			Now: sec, Day: order.Day(sec, time.UTC)})
		if err != nil {
			return err
		}
		if key == "a" && a.Replayed {
			require.Equal(t, first[u], a.OrderID, "user %s's retry under its key", u)
			return nil
		}
		require.False(t, a.Replayed)
		if key == "a" {
			first[u] = a.OrderID
		}
		held[u]++
		admitted++
		return nil
	}
	round := func(at time.Time) reaper.Results {
		now = at
		got, err := r.RunOnce(ctx)
		require.NoError(t, err)
		return got
	}
	round(start)
	var users []string
	for i := range 3 { // 2*at buyers a second: hot from the first reading above it, held 2 s
		sec := start.Add(time.Duration(i) * time.Second)
		for range 2 * at {
			u := fmt.Sprintf("b%d", len(users))
			users = append(users, u)
			require.NoError(t, claim(u, "a", sec))
		}
		got := round(sec.Add(time.Second))
		if i < 2 {
			require.Zero(t, got.Detector.SplitsAsked, "reading %d", i)
			continue
		}
		require.Equal(t, 1, got.Detector.MarkedHot)
		require.Equal(t, 1, got.Detector.SplitsAsked, "a hot voucher's split asked")
		require.Equal(t, 1, got.Splitter.Split, "and done in the same round")
	}
	got, err := e.DB.Voucher(ctx, v.ID)
	require.NoError(t, err)
	require.Equal(t, 4, got.StockBuckets)
	require.False(t, got.Splitting())
	require.NotNil(t, got.SplitAt)
	splits := splitEvents(t, e, v.ID)
	require.Len(t, splits, 1, "one voucher.split event, written with the split done")
	require.Equal(t, 4, splits[0].Buckets)
	require.WithinDuration(t, *got.SplitAt, splits[0].At, time.Second)
	logged := logs.FilterMessage("voucher split").All()
	require.Len(t, logged, 1)
	steps, ok := logged[0].ContextMap()["steps"].(map[string]any)
	require.True(t, ok, "the log names the time of each step: %v", logged[0].ContextMap())
	for _, step := range split.Steps {
		require.Contains(t, steps, step)
	}
	parts, err := e.RDB.ReadVoucherPartitions(ctx, v.ID)
	require.NoError(t, err)
	require.Len(t, parts, 4, "its orders go to four partitions' streams now")

	// The rest of the sale, over four buckets: every buyer retries its
	// first key and claims twice more; new buyers come until it sells out.
	sec := start.Add(4 * time.Second)
	for i := 0; admitted < stock; i++ {
		u := fmt.Sprintf("b%d", i)
		if i < len(users) {
			require.NoError(t, claim(u, "a", sec))
		}
		for _, k := range []string{"b", "c"} {
			err := claim(u, k, sec)
			if !errors.Is(err, rdb.ErrUserLimit) && !errors.Is(err, rdb.ErrSoldOut) {
				require.NoError(t, err)
			}
		}
	}
	_, err = testrdb.Admitter(e.RDB).Admit(ctx, admission.Claim{VoucherID: v.ID, UserID: "late", Now: sec, Day: order.Day(sec, time.UTC)})
	require.ErrorIs(t, err, rdb.ErrSoldOut)
	for u, n := range held {
		require.LessOrEqual(t, n, limit, "user %s", u)
	}
	testenv.Eventually(t, 30*time.Second, "every admission persisted", func() bool {
		return e.Count(t, "SELECT COUNT(*) FROM orders WHERE voucher_id = ?", v.ID) == int64(admitted)
	})
	require.Equal(t, int64(stock), e.Count(t, "SELECT COALESCE(SUM(quantity), 0) FROM orders WHERE voucher_id = ?", v.ID))
	require.Zero(t, e.Count(t, "SELECT COUNT(*) FROM (SELECT user_id FROM orders WHERE voucher_id = ? GROUP BY user_id HAVING COUNT(*) > ?) x", v.ID, limit))
	checks, err := reaper.Reconcile(ctx, e.RDB, e.DB, time.Now(), false)
	require.NoError(t, err)
	compared := false
	for _, c := range checks {
		if c.VoucherID == v.ID {
			require.False(t, c.Splitting)
			require.Empty(t, c.Differences, "Redis and MySQL agree after the split")
			compared = true
		}
	}
	require.True(t, compared, "reconcile compared the voucher")
}

// A voucher MySQL holds hot whose split was never asked (the ask failed,
// or the reaper that marked it died before asking) gets it asked, and
// done, by the first round of a detector that finds it hot; once only.
func TestAHotVoucherNotYetAskedIsSplitNextRound(t *testing.T) {
	e := testenv.New(t, 8)
	ctx := context.Background()
	ends := time.Now().Add(time.Hour)
	v := e.SeedVoucher(t, db.Voucher{Stock: 100, PerUserLimit: 1, EndsAt: &ends}, -1)
	since := time.Now().Add(-time.Minute).UTC()
	require.NoError(t, e.DB.SetHot(ctx, v.ID, &since))
	r, err := reaper.New(reaper.Config{Config: worker.Config{Consumer: "detector"}, HotSplitAt: 1000, HotSplitFor: time.Hour},
		e.RDB, e.DB, zaptest.NewLogger(t), reaper.WithSplitTarget(func(context.Context, int64, int) (int, error) { return 2, nil }))
	require.NoError(t, err)
	got, err := r.RunOnly(ctx, "detector", "splitter")
	require.NoError(t, err)
	require.Equal(t, 1, got.Detector.SplitsAsked, "the hot voucher's split asked")
	require.Equal(t, 1, got.Splitter.Split)
	dv, err := e.DB.Voucher(ctx, v.ID)
	require.NoError(t, err)
	require.Equal(t, 2, dv.StockBuckets)
	got, err = r.RunOnly(ctx, "detector", "splitter")
	require.NoError(t, err)
	require.Zero(t, got.Detector.SplitsAsked, "asked once")
	// Recorded done again (a splitter that died before it heard the
	// commit): no second event.
	require.NoError(t, e.DB.SplitDone(ctx, v.ID, 2, time.Now()))
	require.Len(t, splitEvents(t, e, v.ID), 1, "one voucher.split event")
}

// splitEvents are the splits of voucher v the outbox's events say.
func splitEvents(t *testing.T, e *testenv.Env, v int64) []db.Split {
	t.Helper()
	events, err := e.DB.OutboxEvents(context.Background())
	require.NoError(t, err)
	var out []db.Split
	for _, ev := range events {
		if ev.Split != nil && ev.VoucherID == v {
			out = append(out, *ev.Split)
		}
	}
	return out
}

// A split asked of a sale that ended before it was done, of a voucher
// Redis no longer holds, is dropped rather than refused every round.
func TestASplitAskedOfAnEndedSaleIsDropped(t *testing.T) {
	e := testenv.New(t, 2)
	ctx := context.Background()
	ended := time.Now().Add(-time.Hour)
	v := e.SeedVoucher(t, db.Voucher{Stock: 10, PerUserLimit: 1, EndsAt: &ended}, -1)
	_, _, err := e.DB.AskSplit(ctx, v.ID, 2, db.ActorAdmin, func(db.Voucher) error { return nil })
	require.NoError(t, err)
	require.NoError(t, e.RDB.Client().Del(ctx, e.RDB.VoucherKey(v.ID)).Err())
	r, err := reaper.New(reaper.Config{Config: worker.Config{Consumer: "splitter"}}, e.RDB, e.DB, zaptest.NewLogger(t))
	require.NoError(t, err)
	round, err := r.RunOnly(ctx, "splitter")
	require.NoError(t, err)
	require.Zero(t, round.Splitter.Split)
	got, err := e.DB.Voucher(ctx, v.ID)
	require.NoError(t, err)
	require.False(t, got.Splitting(), "no longer asked")
	require.LessOrEqual(t, got.StockBuckets, 1, "its buckets as they were")
}
