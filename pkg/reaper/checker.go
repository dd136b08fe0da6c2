package reaper

// The checker: reconcile without repairing, on its own (long) interval, so
// that Redis and MySQL disagreeing is a metric and an alert
// (FlashsaleStoresDisagree), not something found by hand. Only vouchers
// not admitting (over or paused) count: during a sale a claim admitted
// between reconcile's reads is a difference of a moment.

import (
	"context"
)

func (r *Reaper) check(ctx context.Context, _ *struct{}) error {
	checks, err := Reconcile(ctx, r.redis, r.db, r.now(), false)
	if err != nil {
		return err
	}
	diffs, vouchers := 0, 0
	for _, c := range checks {
		if c.Quiet && len(c.Differences) > 0 {
			diffs += len(c.Differences)
			vouchers++
		}
	}
	r.metrics.storeDifferences.Set(float64(diffs))
	r.metrics.vouchersDiffering.Set(float64(vouchers))
	r.metrics.lastCheck.SetToCurrentTime()
	return nil
}
