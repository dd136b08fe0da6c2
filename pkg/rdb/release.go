package rdb

// Giving back: a released order's units, and closing a pool for good.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/lua"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb/internal/keyspace"
)

// Release gives back o's reservation (stock, the user's total and daily
// counts, and o.Item to the pool) exactly once; released reports whether
// this call did it. knew is when the caller knew the release owed: a time
// read before it read MySQL's row (or made it). ErrStaleRelease: the
// bucket has forgotten releases done since (ForgetReleases); read again.
func (s *Store) Release(ctx context.Context, o order.Order, knew time.Time) (released bool, err error) {
	// Routed as this process last saw the voucher, as a claim is:
	// release.lua tells a release routed by the wrong count the right one.
	nb := s.KnownBuckets(o.VoucherID)
	for range 3 {
		b := s.userBucketOf(o.VoucherID, o.UserID, nb)
		keys := []string{b.Key(), b.Day(o.Day), b.Released(), b.Pool()}
		res, err := lua.Release.Run(ctx, s.c, keys, o.ID, o.UserID, o.Units(), o.Item.Encode(), knew.UnixMilli(), nb, keyspace.UserHash(o.UserID)).Result()
		if err != nil {
			return false, fmt.Errorf("release order %d: %w", o.ID, err)
		}
		switch n := res.(type) {
		case int64:
			switch n {
			case -1:
				return false, fmt.Errorf("release order %d: %w", o.ID, ErrStaleRelease)
			case -2: // the user's records are moving to a new bucket
				return false, fmt.Errorf("release order %d: %w", o.ID, ErrSplitting)
			}
			return n == 1, nil
		case []any:
			if len(n) == 2 && n[0] == int64(CodeRouteAgain) {
				if m, _ := n[1].(int64); m >= 1 && m <= MaxBuckets {
					nb = int(m)
					s.buckets.Store(o.VoucherID, nb)
					continue
				}
			}
		}
		return false, fmt.Errorf("release order %d: reply %v", o.ID, res)
	}
	return false, fmt.Errorf("release order %d: voucher %d: no answer after three routes", o.ID, o.VoucherID)
}

// ErrStaleRelease says that a release was asked by a caller that knew it owed
// before the bucket's cutoff of forgotten releases (ForgetReleases):
// nothing changed; MySQL's row tells whether it is still owed.
var ErrStaleRelease = errors.New("release known owed before releases were forgotten: read it again")

// forgetChunk bounds the ids of one forget.lua call.
const forgetChunk = 500

// ForgetReleases drops orders' ids from their buckets' sets of released
// orders, once MySQL recorded their releases done before cutoff, raising
// each bucket's cutoff first (forget.lua): release.lua then refuses a
// caller that knew one of them owed before the cutoff, which might
// otherwise give its units a second time. It returns the ids dropped.
func (s *Store) ForgetReleases(ctx context.Context, orders []order.Order, cutoff time.Time) (int, error) {
	type set struct {
		b   bucket
		ids []any
	}
	var sets []*set
	of := map[string]*set{}
	counts := map[int64]int{} // voucher -> its number of buckets, read once a call
	for _, o := range orders {
		n, ok := counts[o.VoucherID]
		if !ok {
			var err error
			if n, err = s.bucketsOf(ctx, o.VoucherID); err != nil {
				return 0, err
			}
			counts[o.VoucherID] = n
		}
		b := s.userBucketOf(o.VoucherID, o.UserID, n)
		st := of[b.Key()]
		if st == nil {
			st = &set{b: b}
			of[b.Key()] = st
			sets = append(sets, st)
		}
		st.ids = append(st.ids, o.ID)
	}
	dropped := 0
	for _, st := range sets {
		for ids := range slices.Chunk(st.ids, forgetChunk) {
			n, err := lua.Forget.Run(ctx, s.c, []string{st.b.Key(), st.b.Released()}, append([]any{cutoff.UnixMilli()}, ids...)...).Int()
			if err != nil {
				return dropped, fmt.Errorf("forget releases of %s: %w", st.b.Key(), err)
			}
			dropped += n
		}
	}
	return dropped, nil
}

func formatID(id int64) string { return strconv.FormatInt(id, 10) }

// ClosePool ends what Redis will hand out of pooled voucher v, for good:
// its pool is emptied, its stock set to zero and the hash marked closed,
// so neither an admission (whatever a gateway's clock says) nor a release
// (release.lua) changes them again. Closing twice is harmless. With a
// durability set, it returns once the replicas have the close, or
// ErrNotReplicated. found is
// false when Redis holds no hash of v (it lost it, or its keys expired):
// there is nothing to close then, and nothing is written.
func (s *Store) ClosePool(ctx context.Context, v int64) (found bool, err error) {
	b := s.bucketOf(v, 0) // a pool is never spread over buckets
	key := b.Key()
	n, err := s.c.Exists(ctx, key).Result()
	if err != nil || n == 0 {
		return false, err
	}
	_, err = s.c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.HSet(ctx, key, "stock", 0, "closed", 1)
		pipe.Del(ctx, b.Pool())
		return nil
	})
	if err != nil {
		return true, fmt.Errorf("close pool of voucher %d: %w", v, err)
	}
	// The refund is recorded after this: a close the replicas lack, lost
	// in a failover, would sell the money again (waits only with a
	// durability set: SetDurability).
	if err := s.WaitWritten(ctx, b.P); err != nil {
		return true, fmt.Errorf("close pool of voucher %d: %w", v, err)
	}
	return true, nil
}
