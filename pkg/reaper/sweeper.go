package reaper

// The sweeper does for the vouchers on sale what the trimmer does for
// those whose sale ended (trimmer.go), every FLASHSALE_REDIS_SWEEP_INTERVAL:
// it drops from the users' indexes of admissions the orders persisted
// since its last pass, and the indexes left empty
// (upkeep.Indexes.Sweep), away from the claims' path, so that a sale
// without an end holds a buyer's count and the orders not yet persisted,
// not every admission it made. Pruning on every acknowledgement instead
// would cost the Redis the claims share a read and a write an order.
// Likewise it forgets the ids of the moves between a voucher's buckets
// made more than settle.ForgetAfter ago (rdb.Store.ForgetMoves), which a
// bucket keeps so that a move given twice is given once.

import (
	"context"

	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/settle"
)

// SweeperResult is what a round of the sweeper did.
type SweeperResult struct {
	// IndexesSwept are the users' indexes of admissions dropped, all their
	// orders persisted (of vouchers on sale).
	IndexesSwept int `log:"indexes_swept"`
	// MovesForgotten are the ids of moves between buckets forgotten, given
	// more than settle.ForgetAfter ago.
	MovesForgotten int `log:"moves_forgotten"`
}

// sweep is the sweeper's round: the users' indexes of the vouchers on sale
// (the trimmer's for those whose sale ended), but those splitting (the
// splitter copies their users; the next pass sweeps them).
func (r *Reaper) sweep(ctx context.Context, res *SweeperResult) error {
	now := r.now()
	vs, err := r.db.ActiveVouchers(ctx, now.UTC(), rdb.KeysOutliveSale)
	if err != nil {
		return err
	}
	for _, v := range vs {
		if (v.EndsAt != nil && !v.EndsAt.After(now)) || v.Splitting() {
			continue
		}
		n, err := r.indexes.Sweep(ctx, v.ID)
		res.IndexesSwept += n
		if err != nil {
			return err
		}
		if v.StockBuckets > 1 {
			n, err := r.redis.ForgetMoves(ctx, v.ID, now.Add(-settle.ForgetAfter))
			res.MovesForgotten += n
			if err != nil {
				return err
			}
		}
	}
	return nil
}
