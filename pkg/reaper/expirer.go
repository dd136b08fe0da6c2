package reaper

// The expirer: orders not paid by their deadline are cancelled and their
// units returned to MySQL's stock, with the releases owed to Redis, in one
// transaction (SKIP LOCKED, so several reapers share the work).

import (
	"context"

	"go.uber.org/zap"
)

// ExpirerResult is what a round of the expirer did.
type ExpirerResult struct {
	// Cancelled are the orders cancelled, not paid in time.
	Cancelled int `log:"cancelled"`
}

func (e ExpirerResult) count(m *metrics) { m.cancelled.Add(float64(e.Cancelled)) }

// cancelExpired cancels unpaid orders past their deadline in batches.
func (r *Reaper) cancelExpired(ctx context.Context, res *ExpirerResult) error {
	for res.Cancelled < r.cfg.MaxPerRound {
		rs, err := r.db.CancelExpired(ctx, r.now().UTC(), r.cfg.BatchSize)
		if err != nil {
			return err
		}
		for _, rel := range rs {
			r.audit.Info("order cancelled", zap.Int64("order_id", rel.OrderID), zap.Int64("voucher_id", rel.VoucherID),
				zap.String("user_id", rel.UserID), zap.String("reason", rel.Reason))
		}
		res.Cancelled += len(rs)
		if len(rs) < r.cfg.BatchSize {
			return nil
		}
	}
	return nil
}
