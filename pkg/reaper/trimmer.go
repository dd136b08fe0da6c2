package reaper

// The trimmer: what a sale leaves in Redis. Each admission appends its
// position to its user's index in the voucher's hash (o:USER, which a
// listing of the user's orders not yet persisted reads, pending.lua);
// during the sale nobody prunes it but those listings, because pruning on
// every acknowledgement costs the Redis the claims share a read and a
// write an order. Once the sale has ended, the trimmer drops every index
// whose orders have all been persisted (rdb.Store.TrimIndexes), a few
// hundred users a script call, and marks the voucher's buckets so it does
// not read them again.

import (
	"context"

	"github.com/flashsale/flashsale/pkg/rdb"
)

// trimIndexes trims the users' indexes of the vouchers whose sale has
// ended and whose keys Redis still holds.
func (r *Reaper) trimIndexes(ctx context.Context, round *Round) error {
	now := r.now()
	vs, err := r.db.ActiveVouchers(ctx, now.UTC(), rdb.KeysOutliveSale)
	if err != nil {
		return err
	}
	for _, v := range vs {
		if v.EndsAt == nil || v.EndsAt.After(now) {
			continue
		}
		done, err := r.redis.TrimIndexes(ctx, v.ID, now)
		if err != nil {
			return err
		}
		if done {
			round.Trimmed++
		}
	}
	return nil
}
