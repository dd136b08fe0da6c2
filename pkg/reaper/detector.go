package reaper

// The detector: which vouchers are hot now. Once a second it reads the
// level of every Redis bucket of every voucher on sale, in one pipelined
// round trip (rdb.Store.Levels: a bucket's stock, counting the units it
// moved to other buckets as still its own, so that admissions alone lower
// it), and turns the fall since its last reading into the units each
// bucket admitted a second (flashsale_bucket_admitted_units_per_second),
// and each Redis master, over the buckets it decides
// (flashsale_master_admitted_units_per_second): no write on the claim's
// path pays for it. A voucher one of whose buckets
// admitted at least FLASHSALE_HOT_SPLIT_AT a second at every reading for
// FLASHSALE_HOT_SPLIT_FOR is marked hot in MySQL (vouchers.hot_since, the
// first reading above it: the admin API and the console show it); one
// below it at every reading as long is marked cool again. Releases and
// top-ups raise a level, so the figure errs low (rdb's doc says when one
// reading can be high); a draw's entries take no stock and read 0. Each reaper's detector reads for
// itself; the mark is one conditional UPDATE.

import (
	"context"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/rdb"
)

// heat is what the detector has seen of one voucher.
type heat struct {
	at     time.Time // its last reading
	levels []int64   // its buckets' levels then
	// over (under): since when its readings have been at or above the
	// threshold (below it); zero when the last one was not.
	over, under time.Time
	// asked: its split was asked (or needs none) since this process
	// last saw it turn hot; a hot voucher not asked yet (the ask failed,
	// or a reaper died between marking it and asking) is asked next res.
	asked bool
}

// detector is the detector's memory between rounds.
type detector struct {
	mu   sync.Mutex
	seen map[int64]*heat
}

// DetectorResult is what a round of the detector did.
type DetectorResult struct {
	// MarkedHot are the vouchers marked hot.
	MarkedHot int `log:"marked_hot"`
	// Cooled are the vouchers no longer hot.
	Cooled int `log:"cooled"`
	// SplitsAsked are the splits asked of vouchers marked hot.
	SplitsAsked int `log:"splits_asked"`
}

// detectHot is the detector's res.
func (r *Reaper) detectHot(ctx context.Context, res *DetectorResult) error {
	now := r.now()
	vs, err := r.db.SellingVouchers(ctx, now.UTC())
	if err != nil {
		return err
	}
	ids, buckets := make([]int64, len(vs)), make([]int, len(vs))
	for i, v := range vs {
		ids[i], buckets[i] = v.ID, v.StockBuckets
	}
	levels, err := r.redis.Levels(ctx, ids, buckets)
	if err != nil {
		return err
	}
	masters, err := r.redis.MastersOf(ctx, ids, buckets)
	if err != nil {
		return err
	}
	perMaster := map[string]int64{}
	d := &r.detector
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.seen == nil {
		d.seen = map[int64]*heat{}
	}
	gone := make(map[int64]bool, len(d.seen))
	for v := range d.seen {
		gone[v] = true
	}
	hot := 0
	for i, v := range vs {
		delete(gone, v.ID)
		h := d.seen[v.ID]
		if h == nil {
			h = &heat{}
			d.seen[v.ID] = h
		}
		isHot := v.HotSince != nil
		top, read := r.rates(v.ID, h, levels[i], masters[i], perMaster, now)
		switch {
		case !read: // a first reading, or the same instant: nothing to compare
		case top >= r.cfg.HotSplitAt:
			h.under = time.Time{}
			if h.over.IsZero() {
				h.over = now
			}
			if !isHot && now.Sub(h.over) >= r.cfg.HotSplitFor {
				since := h.over.UTC()
				if err := r.db.SetHot(ctx, v.ID, &since); err != nil {
					return err
				}
				r.log.Info("voucher hot", zap.Int64("voucher_id", v.ID), zap.Int("buckets", v.StockBuckets),
					zap.Int64("bucket_units_per_second", top), zap.Time("since", since))
				res.MarkedHot++
				isHot = true
			}
		default:
			h.over = time.Time{}
			if h.under.IsZero() {
				h.under = now
			}
			if isHot && now.Sub(h.under) >= r.cfg.HotSplitFor {
				if err := r.db.SetHot(ctx, v.ID, nil); err != nil {
					return err
				}
				r.log.Info("voucher cooled", zap.Int64("voucher_id", v.ID), zap.Int64("bucket_units_per_second", top))
				res.Cooled++
				isHot = false
				h.asked = false
			}
		}
		if isHot && !h.asked {
			if err := r.askSplit(ctx, v.ID, v.StockBuckets, res); err != nil {
				return err
			}
			h.asked = true
		}
		if isHot {
			hot++
		}
	}
	for v := range gone { // no longer on sale: its gauges go
		r.dropRates(v, len(d.seen[v].levels))
		delete(d.seen, v)
	}
	r.metrics.hotVouchers.Set(float64(hot))
	r.metrics.masterRate.Reset()
	for m, n := range perMaster {
		r.metrics.masterRate.WithLabelValues(m).Set(float64(n))
	}
	return nil
}

// rates sets voucher v's buckets' gauges from the fall of their levels
// since h's last reading, adds each to its master's (masters[b] decides
// bucket b), remembers this reading, and returns the highest bucket's
// rate; read is false when there was no earlier reading to compare. A
// bucket Redis did not hold at either reading reads 0.
func (r *Reaper) rates(v int64, h *heat, levels []int64, masters []string, perMaster map[string]int64, now time.Time) (top int64, read bool) {
	elapsed := now.Sub(h.at).Seconds()
	prev := h.levels
	h.at, h.levels = now, levels
	if len(prev) != len(levels) || elapsed <= 0 { // a split changed their number: no comparison across it
		return 0, false
	}
	id := strconv.FormatInt(v, 10)
	for b, level := range levels {
		var rate int64
		if level != rdb.NoLevel && prev[b] != rdb.NoLevel {
			rate = int64(float64(max(prev[b]-level, 0))/elapsed + 0.5)
		}
		r.metrics.bucketRate.WithLabelValues(id, strconv.Itoa(b)).Set(float64(rate))
		perMaster[masters[b]] += rate
		top = max(top, rate)
	}
	return top, true
}

// dropRates removes the gauges of voucher v's n buckets.
func (r *Reaper) dropRates(v int64, n int) {
	id := strconv.FormatInt(v, 10)
	for b := range n {
		r.metrics.bucketRate.DeleteLabelValues(id, strconv.Itoa(b))
	}
}
