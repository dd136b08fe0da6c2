package rdb

// Giving back: a released order's units, and closing a pool for good.

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/lua"
	"github.com/flashsale/flashsale/pkg/order"
)

// Release gives back o's reservation (stock, the user's total and daily
// counts, and o.Item to the pool) exactly once; released reports whether
// this call did it.
func (s *Store) Release(ctx context.Context, o order.Order) (released bool, err error) {
	b, err := s.userBucket(ctx, o.VoucherID, o.UserID)
	if err != nil {
		return false, err
	}
	keys := []string{b.key(), b.day(o.Day), b.released(), b.pool()}
	n, err := lua.Release.Run(ctx, s.c, keys, o.ID, o.UserID, o.Units(), o.Item.Encode()).Int64()
	if err != nil {
		return false, fmt.Errorf("release order %d: %w", o.ID, err)
	}
	return n == 1, nil
}

func formatID(id int64) string { return strconv.FormatInt(id, 10) }

// ClosePool ends what Redis will hand out of pooled voucher v, for good:
// its pool is emptied, its stock set to zero and the hash marked closed,
// so neither an admission (whatever a gateway's clock says) nor a release
// (release.lua) changes them again. Closing twice is harmless.
func (s *Store) ClosePool(ctx context.Context, v int64) error {
	b := s.bucketOf(v, 0) // a pool is never spread over buckets
	key := b.key()
	n, err := s.c.Exists(ctx, key).Result()
	if err != nil || n == 0 {
		return err
	}
	_, err = s.c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.HSet(ctx, key, "stock", 0, "closed", 1)
		pipe.Del(ctx, b.pool())
		return nil
	})
	if err != nil {
		return fmt.Errorf("close pool of voucher %d: %w", v, err)
	}
	return nil
}
