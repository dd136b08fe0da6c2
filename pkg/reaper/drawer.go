package reaper

// The drawer: when a draw sale's window is over, its winners are drawn
// once (pkg/draw), in this order, each step safe to repeat and to run in
// several reapers at once:
//
//  1. the voucher waits while an entry of it is still in a stream: every
//     entry admitted before the end must be persisted (or failed) first;
//  2. MySQL closes it to entries under its row lock (open → drawing): an
//     entry that reaches MySQL later fails with draw_closed;
//  3. the draw (db.Store.Draw): the entries streamed once, the winners and
//     the waitlist's head ranked, then one transaction that only one
//     reaper commits (drawing → drawn);
//  4. the entries that did not win are marked lost, a chunk at a time.
//
// A reaper killed anywhere in between leaves a state the next round
// finishes, with the same winners: the draw depends on the seed and the
// entries only.

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/draw"
)

// DrawGrace is how long after a draw sale's end the drawer waits before
// it looks at the streams: a gateway whose clock runs behind may still
// admit an entry for as long as its clock is off.
const DrawGrace = 2 * time.Second

// lostChunk bounds the rows of one statement marking losers.
const lostChunk = 20000

// DrawerResult is what a round of the drawer did.
type DrawerResult struct {
	// Drawn are the draw sales drawn.
	Drawn int `log:"drawn"`
	// DrawsWaiting are the ended draw sales waiting for entries in flight.
	DrawsWaiting int `log:"draws_waiting"`
	// MarkedLost are the entries of drawn sales marked lost.
	MarkedLost int `log:"marked_lost"`
}

func (d DrawerResult) count(m *metrics) { m.drawn.Add(float64(d.Drawn)) }

// drawEnded draws the draw sales whose window is over.
func (r *Reaper) drawEnded(ctx context.Context, res *DrawerResult) error {
	now := r.now().UTC()
	due, err := r.db.DrawsDue(ctx, now.Add(-DrawGrace), r.cfg.BatchSize)
	if err != nil {
		return err
	}
	for _, v := range due {
		if v.DrawState == draw.StateOpen {
			busy, err := r.redis.InFlight(ctx, v.ID)
			if err != nil {
				return err
			}
			if busy {
				res.DrawsWaiting++
				continue
			}
			if _, err := r.db.BeginDraw(ctx, v.ID); err != nil {
				return err
			}
		}
		start := time.Now()
		drawn, err := r.db.Draw(ctx, v.ID, now)
		if err != nil {
			return err
		}
		if drawn.Drew {
			res.Drawn++
			r.metrics.drawSeconds.Observe(time.Since(start).Seconds())
			r.audit.Info("voucher drawn", zap.Int64("voucher_id", v.ID), zap.Int64("entries", drawn.Entries),
				zap.Int64("winners", drawn.Winners), zap.Duration("took", time.Since(start)))
		}
		for {
			n, err := r.db.MarkLost(ctx, v.ID, now, lostChunk)
			if err != nil {
				return err
			}
			res.MarkedLost += int(n)
			if n < lostChunk {
				break
			}
		}
	}
	return nil
}
