package reaper

// The splitter: every split of a voucher's Redis buckets asked (PATCH
// stock_buckets, or the detector for a voucher it marked hot) and not yet
// done is run (split.Splitter.Split, whose steps resume a split a process left
// half way: a killed reaper's is completed by the next round of any
// reaper), then recorded done in MySQL (stock_buckets, split_at). Asking
// is MySQL's (split_to); doing is Redis's: a split done in Redis and not
// yet recorded is recorded by the next round, Split finding it done.

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/rdb/split"
	"github.com/flashsale/flashsale/pkg/sale"
	"github.com/flashsale/flashsale/pkg/voucher"
)

// SplitterResult is what a round of the splitter did.
type SplitterResult struct {
	// Split are the vouchers whose buckets were split.
	Split int `log:"split"`
}

// splitOwed is the splitter's res.
func (r *Reaper) splitOwed(ctx context.Context, res *SplitterResult) error {
	vs, err := r.db.SplitsOwed(ctx)
	if err != nil {
		return err
	}
	for _, v := range vs {
		start := time.Now()
		times, err := r.splitter.Split(ctx, v.ID, v.SplitTo)
		if errors.Is(err, split.ErrRefused) {
			if v.EndsAt != nil && r.now().After(*v.EndsAt) {
				// Its sale is over: a split no longer buys anything.
				if err := r.db.DropSplit(ctx, v.ID, v.SplitTo); err != nil {
					return err
				}
				r.log.Info("voucher split dropped: its sale ended", zap.Int64("voucher_id", v.ID), zap.Int("to", v.SplitTo), zap.Error(err))
				continue
			}
			// Not in Redis yet (its creation owed), or Redis disagrees
			// with MySQL: left asked, and said.
			r.log.Warn("voucher split refused", zap.Int64("voucher_id", v.ID), zap.Int("to", v.SplitTo), zap.Error(err))
			continue
		}
		if err != nil {
			return err
		}
		if err := r.db.SplitDone(ctx, v.ID, v.SplitTo, r.now().UTC()); err != nil {
			return err
		}
		took := time.Since(start)
		r.metrics.splitSeconds.Observe(took.Seconds())
		r.metrics.splitPauseSeconds.Observe(times.Paused.Seconds())
		steps := make([]zap.Field, len(times.Steps))
		for i, st := range times.Steps {
			steps[i] = zap.Duration(st.Name, st.Took)
		}
		r.log.Info("voucher split", zap.Int64("voucher_id", v.ID), zap.Int("from", v.StockBuckets), zap.Int("to", v.SplitTo),
			zap.Duration("took", took), zap.Duration("paused", times.Paused), zap.Dict("steps", steps...))
		res.Split++
	}
	return nil
}

// askSplit asks for hot voucher v's buckets (n of them) to be split over
// every master (FLASHSALE_HOT_SPLIT auto): nothing when they are already,
// or on one Redis, or when the voucher cannot be split (a pool, a draw, a
// waiting room: pkg/voucher's rules, which a PATCH follows too).
func (r *Reaper) askSplit(ctx context.Context, v int64, n int, res *DetectorResult) error {
	if r.cfg.HotSplit != HotSplitAuto {
		return nil
	}
	to, err := r.splitTarget(ctx, v, max(n, 1))
	if err != nil || to <= max(n, 1) {
		return err
	}
	_, actions, err := r.db.AskSplit(ctx, v, to, db.ActorReaper, func(dv db.Voucher) error {
		if dv.Splitting() {
			return errSplitAsked
		}
		return voucher.Split(dv, int64(to), r.now())
	})
	switch {
	case err == nil:
		voucher.LogActions(r.log, actions)
		res.SplitsAsked++
		return nil
	case errors.Is(err, errSplitAsked), errors.Is(err, db.ErrNotFound):
		return nil
	}
	var fe *sale.FieldError
	if errors.As(err, &fe) {
		r.log.Info("hot voucher not split", zap.Int64("voucher_id", v), zap.String("why", fe.Msg))
		return nil
	}
	return err
}

var errSplitAsked = errors.New("a split is asked already")
