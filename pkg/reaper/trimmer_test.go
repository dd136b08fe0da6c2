package reaper_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/persist"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/reaper"
	"github.com/flashsale/flashsale/pkg/settle"
)

// What a sale leaves in Redis: each buyer's index of admissions (o:USER)
// stays in the voucher's hash until the buyer lists their orders. Once the
// sale has ended, the trimmer drops every index whose orders were all
// persisted and keeps the others (their orders are still listed); it
// leaves a voucher on sale alone, and reads a trimmed voucher no more.
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
			_, err := e.RDB.Admit(ctx, rdb.Claim{VoucherID: v.ID, UserID: user(i), Now: now, Day: order.Day(now, time.UTC)})
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
	require.Zero(t, got.Trimmed)
	n, _ = indexes()
	require.Equal(t, buyers+late, n, "a voucher on sale is left alone")

	over := newReaper(t, e, "trimmer", func() time.Time { return ends.Add(time.Second) })
	got, err = over.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, got.Trimmed, "orders still pending: not done")
	n, _ = indexes()
	require.Equal(t, late, n, "the indexes of orders not yet persisted are kept")
	pending, err := e.RDB.UserPending(ctx, v.ID, user(buyers))
	require.NoError(t, err)
	require.Len(t, pending, 1, "and their orders still listed")

	persistAll()
	got, err = over.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, got.Trimmed)
	n, after := indexes()
	require.Zero(t, n)
	t.Logf("the voucher's hashes after %d buyers: %d bytes, %d trimmed (%.0f → %.0f bytes a buyer)",
		buyers+late, before, after, float64(before)/(buyers+late), float64(after)/(buyers+late))
	require.Less(t, after, before)
	got, err = over.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, got.Trimmed, "trimmed once: not read again")
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
	require.Equal(t, 3, got.Cancelled)
	require.Equal(t, 4, got.ReleasedToRedis)
	require.Zero(t, got.ReleasesForgotten, "recorded done just now: kept")
	require.EqualValues(t, 4, released())

	afterwards := later.Add(settle.ForgetAfter + time.Second)
	got, err = newReaper(t, e, "reaper-1", func() time.Time { return afterwards }).RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, got.ReleasesForgotten)
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
