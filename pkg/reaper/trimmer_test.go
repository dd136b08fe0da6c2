package reaper_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/persist"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
	"github.com/flashsale/flashsale/pkg/rdb/upkeep"
	"github.com/flashsale/flashsale/pkg/reaper"
	"github.com/flashsale/flashsale/pkg/settle"
)

// What a sale leaves in Redis: each buyer's index of admissions (o:USER)
// in the voucher's hash. While it sells, the sweeper drops every index
// whose orders were all persisted and keeps the others (their orders are
// still listed); once the sale has ended, the trimmer does, marks the
// voucher trimmed, and reads it no more.
func TestTheTrimmerDropsTheIndexesASaleLeaves(t *testing.T) {
	e := testenv.New(t, 4)
	ctx := context.Background()
	const buckets, buyers, late = 2, 2000, 5
	ends := time.Now().Add(time.Hour)
	v := e.SeedVoucher(t, db.Voucher{Stock: buyers + late, StockBuckets: buckets, PerUserLimit: 1, EndsAt: &ends}, -1)
	user := func(i int) string { return fmt.Sprintf("buyer-%d", i) }
	admitUsers := func(from, to int) {
		now := time.Now()
		for i := from; i < to; i++ {
			_, err := testrdb.Admitter(e.RDB).Admit(ctx, admission.Claim{VoucherID: v.ID, UserID: user(i), Now: now, Day: order.Day(now, time.UTC)})
			require.NoError(t, err)
		}
	}
	w := persist.NewOrders(persist.Config{Consumer: "helper"}, e.RDB, e.DB, zaptest.NewLogger(t), nil, nil)
	persistAll := func() {
		for _, p := range e.RDB.VoucherPartitions(v.ID, buckets) {
			entries, err := e.RDB.ReadGroup(ctx, p, "helper", ">", 10000, 10*time.Millisecond)
			require.NoError(t, err)
			require.NoError(t, w.Handle(ctx, entries))
		}
	}
	keys := func() []string {
		var out []string
		for b := range buckets { // bucket B: partition P+B, :bB (rdb keys.go)
			k := fmt.Sprintf("flashsale:{p%d}:v:%d", (e.RDB.PartitionOf(v.ID)+b)%4, v.ID)
			if b > 0 {
				k += fmt.Sprintf(":b%d", b)
			}
			out = append(out, k)
		}
		require.Equal(t, e.RDB.VoucherKey(v.ID), out[0])
		return out
	}
	indexes := func() (n int, bytes int64) {
		for _, k := range keys() {
			fields, err := e.RDB.Client().HKeys(ctx, k).Result()
			require.NoError(t, err)
			for _, f := range fields {
				if f[:2] == "o:" {
					n++
				}
			}
			m, err := e.RDB.Client().MemoryUsage(ctx, k).Result()
			require.NoError(t, err)
			bytes += m
		}
		return n, bytes
	}
	admitUsers(0, buyers)
	persistAll()
	admitUsers(buyers, buyers+late) // admitted, not yet persisted
	n, before := indexes()
	require.Equal(t, buyers+late, n, "an index a buyer")

	onSale := newReaper(t, e, "trimmer", time.Now)
	got, err := onSale.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, got.Trimmer.Trimmed, "a voucher on sale is not marked trimmed")
	require.Equal(t, buyers, got.Sweeper.IndexesSwept, "the sweeper dropped the indexes of the persisted")
	n, _ = indexes()
	require.Equal(t, late, n, "while it sells, the sweeper keeps only the indexes of orders not yet persisted")

	over := newReaper(t, e, "trimmer", func() time.Time { return ends.Add(time.Second) })
	got, err = over.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, got.Trimmer.Trimmed, "orders still pending: not done")
	n, _ = indexes()
	require.Equal(t, late, n, "the indexes of orders not yet persisted are kept")
	pending, err := e.RDB.UserPending(ctx, v.ID, user(buyers))
	require.NoError(t, err)
	require.Len(t, pending, 1, "and their orders still listed")

	persistAll()
	got, err = over.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, got.Trimmer.Trimmed)
	n, after := indexes()
	require.Zero(t, n)
	t.Logf("the voucher's hashes after %d buyers: %d bytes, %d trimmed (%.0f → %.0f bytes a buyer)",
		buyers+late, before, after, float64(before)/(buyers+late), float64(after)/(buyers+late))
	require.Less(t, after, before)
	got, err = over.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, got.Trimmer.Trimmed, "trimmed once: not read again")
}

// Released orders are forgotten settle.ForgetAfter after MySQL recorded
// them done, not before, and a caller that knew one owed before that is
// refused rather than obeyed: each unit still comes back once.
func TestReleasesAreForgottenAndAStaleOneIsRefused(t *testing.T) {
	e := testenv.New(t, 2)
	ctx := context.Background()
	v := e.SeedVoucher(t, db.Voucher{Stock: 10, PerUserLimit: 1, PaymentTimeoutSeconds: 60}, -1)
	admit(t, e, v.ID, users("u", 4)...)
	persistVoucher(t, e, v.ID)
	later := time.Now().Add(2 * time.Minute)
	// A caller reads u0's release owed (as a second reaper would), and is
	// slow to apply it.
	knew := later
	stale, err := e.DB.CancelExpired(ctx, later, 1)
	require.NoError(t, err)
	require.Len(t, stale, 1)
	released := func() int64 {
		n, err := e.RDB.Client().SCard(ctx, e.RDB.VoucherKey(v.ID)+":released").Result()
		require.NoError(t, err)
		return n
	}

	got, err := newReaper(t, e, "reaper-1", func() time.Time { return later }).RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, got.Expirer.Cancelled)
	require.Equal(t, 4, got.Releaser.ReleasedToRedis)
	require.Zero(t, got.Trimmer.ReleasesForgotten, "recorded done just now: kept")
	require.EqualValues(t, 4, released())

	afterwards := later.Add(settle.ForgetAfter + time.Second)
	got, err = newReaper(t, e, "reaper-1", func() time.Time { return afterwards }).RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, got.Trimmer.ReleasesForgotten)
	require.Zero(t, released(), "forgotten")
	require.EqualValues(t, 10, redisStock(t, e, v.ID))

	_, err = e.RDB.Release(ctx, stale[0].Order(), knew)
	require.ErrorIs(t, err, rdb.ErrStaleRelease)
	given, err := settle.Releases(ctx, e.RDB, e.DB, stale, knew, afterwards)
	require.NoError(t, err)
	require.Zero(t, given)
	require.EqualValues(t, 10, redisStock(t, e, v.ID), "the stale caller gave nothing twice")
	checks, err := reaper.Reconcile(ctx, e.RDB, e.DB, afterwards, false)
	require.NoError(t, err)
	for _, c := range checks {
		require.Empty(t, c.Differences, "voucher %d", c.VoucherID)
	}
}

// While a sale without an end runs, the sweeper drops from its users'
// indexes what was persisted since, and nothing a limit or a listing
// needs: two sweepers at once (two stores, as two reapers), a third of
// their passes cut off part-way (as a kill -9 would leave one), racing
// claims past the per-user limit, workers persisting part of what was
// admitted, and the orders left unpaid expiring and their units coming
// back (a quarter of the buyers paid for their first). Through it all
// each buyer's count is what their orders hold, the
// orders not yet persisted stay listed, and once everything is persisted
// one more pass leaves no index at all.
func TestTheSweepRacingASaleDropsOnlyWhatWasPersisted(t *testing.T) {
	e := testenv.New(t, 4)
	ctx := context.Background()
	const buckets, buyers, limit = 2, 200, 2
	v := e.SeedVoucher(t, db.Voucher{Stock: 100000, StockBuckets: buckets, PerUserLimit: limit, PaymentTimeoutSeconds: 60}, -1)
	other, err := rdb.New(e.RDB.Client(), 4, rdb.DefaultGroup)
	require.NoError(t, err)
	w := persist.NewOrders(persist.Config{Consumer: "helper"}, e.RDB, e.DB, zaptest.NewLogger(t), nil, nil)
	persistUpTo := func(n int) { // reads at most n entries a partition and persists them
		for _, p := range e.RDB.VoucherPartitions(v.ID, buckets) {
			entries, err := e.RDB.ReadGroup(ctx, p, "helper", ">", n, time.Millisecond)
			require.NoError(t, err)
			require.NoError(t, w.Handle(ctx, entries))
		}
	}
	user := func(i int) string { return fmt.Sprintf("sweep-%d", i) }

	var sweeps, cut atomic.Int64
	stop := make(chan struct{})
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	for _, s := range []*rdb.Store{e.RDB, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				sctx, cancel := context.WithCancel(ctx)
				cutting := i%3 == 0 // its deadline cuts it off, before or between calls or during one
				if cutting {
					sctx, cancel = context.WithTimeout(ctx, time.Duration(i%7)*200*time.Microsecond)
				}
				_, err := upkeep.NewIndexes(s).Sweep(sctx, v.ID)
				cancel()
				switch {
				case err != nil && !cutting:
					errs <- err
					return
				case err != nil:
					cut.Add(1)
				}
				sweeps.Add(1)
			}
		}()
	}

	claim := func(round int) map[string][]int64 { // every buyer once; the ids admitted
		admitted := map[string][]int64{}
		now := time.Now()
		for i := range buyers {
			a, err := testrdb.Admitter(e.RDB).Admit(ctx, admission.Claim{VoucherID: v.ID, UserID: user(i), Now: now, Day: order.Day(now, time.UTC)})
			if errors.Is(err, rdb.ErrUserLimit) {
				continue
			}
			require.NoError(t, err, "round %d, %s", round, user(i))
			admitted[user(i)] = append(admitted[user(i)], a.OrderID)
		}
		return admitted
	}
	paid := claim(0)
	persistUpTo(1000)
	for i := range buyers / 4 { // a quarter pay for their first: those are kept
		u := user(i)
		_, err := e.DB.PayOrder(ctx, paid[u][0], u, time.Now())
		require.NoError(t, err)
	}
	claim(1) // the limit reached
	persistUpTo(3)
	claim(2) // refused: each holds two
	// The orders left unpaid expire, their units come back to Redis (the
	// reaper's expirer and releaser; its sweeper runs in its round too).
	later := time.Now().Add(2 * time.Minute)
	persistUpTo(1000)
	_, err = newReaper(t, e, "expirer", func() time.Time { return later }).RunOnce(ctx)
	require.NoError(t, err)
	last := claim(3) // bought again, and not persisted
	require.NotEmpty(t, last)
	testenv.Eventually(t, 2*time.Minute, "1,000 sweeps", func() bool {
		select {
		case err := <-errs:
			t.Fatalf("a sweep failed: %v", err)
		default:
		}
		return sweeps.Load() >= 1000
	})
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	t.Logf("%d sweeps, %d of them cut off part-way", sweeps.Load(), cut.Load())
	require.NotZero(t, cut.Load(), "some passes were cut off")

	for i := range buyers {
		u := user(i)
		rows, err := e.DB.UserOrders(ctx, v.ID, u, 100)
		require.NoError(t, err)
		live := 0
		for _, o := range rows {
			if o.Status != string(order.StatusCancelled) && o.Status != string(order.StatusFailed) {
				live++
			}
		}
		pending, err := e.RDB.UserPending(ctx, v.ID, u)
		require.NoError(t, err)
		ids := map[int64]bool{}
		for _, o := range pending {
			ids[o.ID] = true
		}
		for _, id := range last[u] {
			require.True(t, ids[id], "%s: order %d, admitted and not yet persisted, still listed", u, id)
		}
		n, err := e.RDB.UserCount(ctx, v.ID, u)
		require.NoError(t, err)
		require.EqualValues(t, live+len(last[u]), n, "%s: the count is what the orders hold", u)
		if i < buyers/4 {
			require.GreaterOrEqual(t, live, 1, "%s: the order paid for is kept", u)
		}
		require.LessOrEqual(t, n, int64(limit))
	}

	persistUpTo(1000)
	_, err = upkeep.NewIndexes(e.RDB).Sweep(ctx, v.ID)
	require.NoError(t, err)
	for b := range buckets {
		k := fmt.Sprintf("flashsale:{p%d}:v:%d", (e.RDB.PartitionOf(v.ID)+b)%4, v.ID)
		if b > 0 {
			k += fmt.Sprintf(":b%d", b)
		}
		fields, err := e.RDB.Client().HKeys(ctx, k).Result()
		require.NoError(t, err)
		for _, f := range fields {
			require.False(t, strings.HasPrefix(f, "o:"), "%s: index %s left after everything was persisted", k, f)
		}
	}
}

// A sale without an end whose buyers all buy in one bucket moves units
// there from the other, and each bucket keeps the ids of the moves given
// to it; the sweeper forgets those made more than settle.ForgetAfter ago,
// and the voucher keeps every unit.
func TestTheSweeperForgetsOldMovesBetweenBuckets(t *testing.T) {
	e := testenv.New(t, 4)
	ctx := context.Background()
	const stock, buyers = 100, 80
	v := e.SeedVoucher(t, db.Voucher{Stock: stock, StockBuckets: 2, PerUserLimit: 1}, -1)
	admitted := 0
	for i := 0; admitted < buyers; i++ {
		u := fmt.Sprintf("mover-%d", i)
		if rdb.UserBucket(u, 2) != 1 {
			continue
		}
		now := time.Now()
		_, err := testrdb.Admitter(e.RDB).Admit(ctx, admission.Claim{VoucherID: v.ID, UserID: u, Now: now, Day: order.Day(now, time.UTC)})
		require.NoError(t, err)
		admitted++
	}
	given := func() int64 { // the ids bucket 1 keeps (rdb keys.go: partition P+1, :b1)
		key := fmt.Sprintf("flashsale:{p%d}:v:%d:b1:moves:in", (e.RDB.PartitionOf(v.ID)+1)%4, v.ID)
		n, err := e.RDB.Client().SCard(ctx, key).Result()
		require.NoError(t, err)
		return n
	}
	moves := given()
	require.Positive(t, moves, "bucket 1 refilled from bucket 0")

	got, err := newReaper(t, e, "sweeper", time.Now).RunOnly(ctx, "sweeper")
	require.NoError(t, err)
	require.Zero(t, got.Sweeper.MovesForgotten, "moves made now are kept")

	later := func() time.Time { return time.Now().Add(settle.ForgetAfter + time.Minute) }
	got, err = newReaper(t, e, "sweeper", later).RunOnly(ctx, "sweeper")
	require.NoError(t, err)
	require.EqualValues(t, moves, got.Sweeper.MovesForgotten)
	require.Zero(t, given())
	left, _, err := e.RDB.RemainingStock(ctx, v.ID)
	require.NoError(t, err)
	require.EqualValues(t, stock-buyers, left, "no unit made or lost")
}
