package reaper

// The mover: a gateway that crashed between the two halves of a move of
// units between a hot voucher's buckets (rdb buckets.go) left the units
// taken from one bucket and not given to the other. A claim that finds the
// voucher dry gives such moves itself; the mover gives them in the
// meantime, so the admin API's remaining_redis and reconcile see them
// where they belong.

import (
	"context"

	"github.com/flashsale/flashsale/pkg/rdb"
)

// finishMoves gives the moves left half way of the bucketed vouchers on sale.
func (r *Reaper) finishMoves(ctx context.Context, round *Round) error {
	bucketed, err := r.db.BucketedVouchers(ctx, r.now().UTC(), rdb.KeysOutliveSale)
	if err != nil {
		return err
	}
	for _, v := range bucketed {
		n, err := r.redis.FinishMoves(ctx, v)
		if err != nil {
			return err
		}
		round.MovesFinished += n
	}
	return nil
}
