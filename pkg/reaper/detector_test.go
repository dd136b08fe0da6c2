package reaper_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
	"github.com/flashsale/flashsale/pkg/reaper"
	"github.com/flashsale/flashsale/pkg/worker"
)

// The detector marks a voucher hot once one of its buckets has admitted
// FLASHSALE_HOT_SPLIT_AT units a second at every reading for
// FLASHSALE_HOT_SPLIT_FOR, from the first reading above it, and cool again
// once below it as long; a voucher below it, and one above it for less
// than the time, is never marked; the gauges follow each bucket (the
// first reading has nothing to compare with), and go with the sale.
func TestTheDetectorMarksAVoucherHotAndCool(t *testing.T) {
	e := testenv.New(t, 4)
	ctx := context.Background()
	const buckets, at = 3, 30
	start := time.Now().Truncate(time.Second).Add(-time.Minute)
	ends := start.Add(time.Hour)
	hot := e.SeedVoucher(t, db.Voucher{Stock: 100000, StockBuckets: buckets, PerUserLimit: 1, EndsAt: &ends}, -1)
	warm := e.SeedVoucher(t, db.Voucher{Stock: 100000, PerUserLimit: 1, EndsAt: &ends}, -1)
	now := start
	reg := prometheus.NewRegistry()
	r, err := reaper.New(reaper.Config{Config: worker.Config{Consumer: "detector"}, HotSplitAt: at, HotSplitFor: 2 * time.Second},
		e.RDB, e.DB, zaptest.NewLogger(t), reaper.WithRegistry(reg), reaper.WithClock(func() time.Time { return now }))
	require.NoError(t, err)
	masters := map[string]bool{"redis": true}
	if cc, ok := e.RDB.Client().(*redis.ClusterClient); ok {
		masters = map[string]bool{}
		require.NoError(t, cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
			masters[c.Options().Addr] = true
			return nil
		}))
	}
	n := 0
	// second admits, in second sec, 3×at claims of the hot voucher
	// spread over its buckets (one bucket takes at least at) and at-1 of
	// the warm one.
	second := func(sec time.Time) {
		claims := func(v int64, k int) {
			for range k {
				u := "u" + strconv.Itoa(n)
				n++
				_, err := testrdb.Admitter(e.RDB).Admit(ctx, admission.Claim{VoucherID: v, UserID: u, Now: sec.Add(time.Duration(n%900) * time.Millisecond), Day: order.Day(sec, time.UTC)})
				require.NoError(t, err)
			}
		}
		claims(hot.ID, buckets*at)
		claims(warm.ID, at-1)
	}
	round := func(at time.Time) reaper.Results {
		now = at
		got, err := r.RunOnce(ctx)
		require.NoError(t, err)
		return got
	}
	hotSince := func(v int64) *time.Time {
		got, err := e.DB.Voucher(ctx, v)
		require.NoError(t, err)
		return got.HotSince
	}
	rate := func(v int64, b int) float64 {
		return testenv.Metric(t, reg, "flashsale_bucket_admitted_units_per_second", "voucher_id", strconv.FormatInt(v, 10), "bucket", strconv.Itoa(b))
	}

	s := start
	require.Zero(t, round(s).Detector.MarkedHot)
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		require.NotEqual(t, "flashsale_bucket_admitted_units_per_second", f.GetName(), "a first reading has no rate")
	}
	for i := range 3 { // readings at s+1 (crossed), s+2, s+3 (held 2 s)
		second(s.Add(time.Duration(i) * time.Second))
		got := round(s.Add(time.Duration(i+1) * time.Second))
		var sum float64
		for b := range buckets {
			sum += rate(hot.ID, b)
		}
		require.EqualValues(t, buckets*at, sum, "reading %d: the buckets' gauges add up to the second's admissions", i)
		require.EqualValues(t, at-1, rate(warm.ID, 0), "reading %d", i)
		perMaster := series(t, reg, "flashsale_master_admitted_units_per_second", "master")
		var total float64
		for m, n := range perMaster {
			require.Contains(t, masters, m, "a master of this Redis")
			total += n
		}
		require.EqualValues(t, buckets*at+at-1, total, "reading %d: the masters' figures add up to every bucket's", i)
		if i < 2 {
			require.Nil(t, hotSince(hot.ID), "reading %d: above the threshold for less than FLASHSALE_HOT_SPLIT_FOR", i)
			require.Zero(t, got.Detector.MarkedHot)
			continue
		}
		require.Equal(t, 1, got.Detector.MarkedHot)
	}
	since := hotSince(hot.ID)
	require.NotNil(t, since, "held above the threshold for FLASHSALE_HOT_SPLIT_FOR")
	require.True(t, since.Equal(s.Add(time.Second)), "hot since the first reading above it, %v; got %v", s.Add(time.Second), since)
	require.Nil(t, hotSince(warm.ID), "one below the threshold is never hot")
	require.EqualValues(t, 1, testenv.Metric(t, reg, "flashsale_hot_vouchers"))

	// Quiet: cool once below it for FLASHSALE_HOT_SPLIT_FOR, not before.
	require.Zero(t, round(s.Add(5*time.Second)).Detector.Cooled)
	require.NotNil(t, hotSince(hot.ID), "below the threshold for less than FLASHSALE_HOT_SPLIT_FOR")
	require.Equal(t, 1, round(s.Add(7*time.Second)).Detector.Cooled)
	require.Nil(t, hotSince(hot.ID))
	require.Zero(t, testenv.Metric(t, reg, "flashsale_hot_vouchers"))

	// A bucket Redis lost (restarted empty) is no reading, not a fall of
	// its whole stock.
	require.NoError(t, e.RDB.Client().Del(ctx, e.RDB.VoucherKey(warm.ID)).Err())
	round(s.Add(8 * time.Second))
	require.Zero(t, rate(warm.ID, 0), "a lost bucket admitted nothing")

	// A sale over: its gauges go.
	round(ends.Add(time.Second))
	families, err = reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		require.NotEqual(t, "flashsale_bucket_admitted_units_per_second", f.GetName(), fmt.Sprint(f.GetMetric()))
	}
}

// series reads every series of the gauge name, by the value of its label.
func series(t *testing.T, g prometheus.Gatherer, name, label string) map[string]float64 {
	t.Helper()
	families, err := g.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label {
					out[lp.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}
