package reaper

// The detector: which vouchers are hot now. admit.lua counts each Redis
// bucket's admissions a second in the bucket's hash (rdb.Store.Rates);
// once a second the detector reads them for every voucher on sale, in one
// pipelined round trip, and exports them (flashsale_bucket_admissions_per_second).
// A voucher one of whose buckets admitted at least FLASHSALE_HOT_SPLIT_AT
// orders a second at every reading for FLASHSALE_HOT_SPLIT_FOR is marked
// hot in MySQL (vouchers.hot_since, the time the threshold was first
// crossed: the admin API and the console show it); one below it at every
// reading as long is marked cool again. Its readings are its own: reapers
// that each run a detector mark the same vouchers (the mark is one
// conditional UPDATE), each from what it read.

import (
	"context"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
)

// heat is what the detector has seen of one voucher: since when its
// readings have been at or above the threshold (over), or below it
// (under); zero when the last reading was not.
type heat struct {
	over, under time.Time
	buckets     int // the buckets whose gauges it set
}

// detector is the detector's memory between rounds.
type detector struct {
	mu   sync.Mutex
	seen map[int64]*heat
}

// detectHot is the detector's round.
func (r *Reaper) detectHot(ctx context.Context, round *Round) error {
	now := r.now()
	vs, err := r.db.SellingVouchers(ctx, now.UTC())
	if err != nil {
		return err
	}
	ids, buckets := make([]int64, len(vs)), make([]int, len(vs))
	for i, v := range vs {
		ids[i], buckets[i] = v.ID, v.StockBuckets
	}
	rates, err := r.redis.Rates(ctx, ids, buckets, now)
	if err != nil {
		return err
	}
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
		var top int64
		id := strconv.FormatInt(v.ID, 10)
		for b, n := range rates[i] {
			r.metrics.bucketRate.WithLabelValues(id, strconv.Itoa(b)).Set(float64(n))
			top = max(top, n)
		}
		for b := len(rates[i]); b < h.buckets; b++ {
			r.metrics.bucketRate.DeleteLabelValues(id, strconv.Itoa(b))
		}
		h.buckets = len(rates[i])
		isHot := v.HotSince != nil
		if top >= r.cfg.HotSplitAt {
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
					zap.Int64("bucket_admissions_per_second", top), zap.Time("since", since))
				round.MarkedHot++
				isHot = true
			}
		} else {
			h.over = time.Time{}
			if h.under.IsZero() {
				h.under = now
			}
			if isHot && now.Sub(h.under) >= r.cfg.HotSplitFor {
				if err := r.db.SetHot(ctx, v.ID, nil); err != nil {
					return err
				}
				r.log.Info("voucher cooled", zap.Int64("voucher_id", v.ID), zap.Int64("bucket_admissions_per_second", top))
				round.Cooled++
				isHot = false
			}
		}
		if isHot {
			hot++
		}
	}
	for v := range gone { // no longer on sale: its gauges go
		id := strconv.FormatInt(v, 10)
		for b := range d.seen[v].buckets {
			r.metrics.bucketRate.DeleteLabelValues(id, strconv.Itoa(b))
		}
		delete(d.seen, v)
	}
	r.metrics.hotVouchers.Set(float64(hot))
	return nil
}
