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

// MoverResult is what a round of the mover did.
type MoverResult struct {
	// MovesFinished are the moves between a voucher's buckets that were
	// left half way and are given now.
	MovesFinished int `log:"moves_finished"`
}

// finishMoves gives the moves left half way of the bucketed vouchers on sale.
func (r *Reaper) finishMoves(ctx context.Context, res *MoverResult) error {
	bucketed, err := r.db.BucketedVouchers(ctx, r.now().UTC(), rdb.KeysOutliveSale)
	if err != nil {
		return err
	}
	for _, v := range bucketed {
		n, err := r.redis.FinishMoves(ctx, v)
		if err != nil {
			return err
		}
		res.MovesFinished += n
	}
	return nil
}
