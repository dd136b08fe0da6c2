package reaper

// The refunder: when the sale of a kind that refunds at its end (red
// envelopes, pkg/sale) is over, what nobody grabbed goes back to the
// sender, exactly once. In this order, each step safe to repeat:
//
//  1. the pool in Redis is closed (rdb.ClosePool), so no admission can take
//     an envelope any more, whatever a gateway's clock says; with
//     FLASHSALE_REDIS_DURABILITY set, once the replicas have the close (a
//     close a failover lost would sell again what step 3 refunds);
//  2. the voucher waits while an entry of it is still in the stream: a grab
//     admitted before the close must land (or fail, its envelope then
//     counted in the refund) before the money is counted;
//  3. MySQL records the refund under the voucher's row lock, only while
//     refunded_at is unset, so several reapers refund it once.

import (
	"context"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/sale"
)

// refunding lists the kinds the refunder looks after.
var refunding = sale.With(func(t sale.Traits) bool { return t.RefundsAtEnd })

// RefunderResult is what a round of the refunder did.
type RefunderResult struct {
	// Refunded are the ended envelope sales refunded.
	Refunded int `log:"refunded"`
	// RefundsWaiting are the ended envelope sales waiting for grabs in
	// flight.
	RefundsWaiting int `log:"refunds_waiting"`
}

func (rr RefunderResult) count(m *metrics) { m.refunded.Add(float64(rr.Refunded)) }

// refundEnded refunds the vouchers whose sale is over.
func (r *Reaper) refundEnded(ctx context.Context, res *RefunderResult) error {
	now := r.now().UTC()
	due, err := r.db.RefundDue(ctx, refunding, now, r.cfg.BatchSize)
	if err != nil {
		return err
	}
	for _, v := range due {
		found, err := r.redis.ClosePool(ctx, v.ID)
		if err != nil {
			return err
		}
		if !found {
			// Nothing in Redis to close: it lost the voucher, or its keys
			// expired. Said, since a voucher rebuilt open after this point
			// would sell what MySQL refunds.
			r.log.Warn("refund: redis holds no hash of the voucher to close; refunding from mysql",
				zap.Int64("voucher_id", v.ID))
		}
		busy, err := r.redis.InFlight(ctx, v.ID)
		if err != nil {
			return err
		}
		if busy {
			res.RefundsWaiting++
			continue
		}
		amount, done, err := r.db.Refund(ctx, v.ID, now)
		if err != nil {
			return err
		}
		if done {
			res.Refunded++
			r.audit.Info("voucher refunded", zap.Int64("voucher_id", v.ID), zap.Int64("refunded_amount", amount))
		}
	}
	return nil
}
