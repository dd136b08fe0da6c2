package rdb_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
)

// A voucher's keys expire once its sale and payment window are over (plus
// KeysOutliveSale): Redis does not grow with every sale ever run. A sale
// without an end keeps them.
func TestVoucherKeysExpireAfterTheSale(t *testing.T) {
	s := newStore(t, 1)
	ctx := context.Background()
	now := time.Now().UTC()
	ends := now.Add(time.Hour)
	expireAt := rdb.KeysExpireAt(ends, 15*time.Minute)
	require.Equal(t, ends.Add(15*time.Minute+rdb.KeysOutliveSale).Truncate(time.Second), expireAt)
	seedVoucher(t, s, rdb.Voucher{ID: 1, Stock: 5, PerUserDailyLimit: 3, EndsAt: ends, ExpireAt: expireAt})
	seedVoucher(t, s, rdb.Voucher{ID: 2, Stock: 5})

	a, err := testrdb.Admitter(s).Admit(ctx, admission.Claim{VoucherID: 1, UserID: "alice", Now: now, Day: order.Day(now, time.UTC),
		IdempotencyKey: "k1", IdempotencyTTL: time.Hour})
	require.NoError(t, err)
	_, err = claim(s, 2, "alice", now)
	require.NoError(t, err)
	released, err := s.Release(ctx, order.Order{ID: a.OrderID, VoucherID: 1, UserID: "alice", Day: order.Day(now, time.UTC)}, now)
	require.NoError(t, err)
	require.True(t, released)

	c := s.Client()
	keys := keysOf(t, s, "flashsale:{p0}:v:1*")
	require.Len(t, keys, 4, "hash (with the users' counts), day, idempotency, released: %v", keys)
	for _, k := range keys {
		ttl, err := c.ExpireTime(ctx, k).Result()
		require.NoError(t, err)
		require.Positive(t, ttl, "%s has no expiry", k)
		require.LessOrEqual(t, ttl, time.Duration(expireAt.Unix())*time.Second, "%s outlives the voucher", k)
	}
	for _, k := range []string{"flashsale:{p0}:v:2"} {
		ttl, err := c.TTL(ctx, k).Result()
		require.NoError(t, err)
		require.Equal(t, time.Duration(-1), ttl, "%s of a sale without an end expires", k)
	}

	// A released order's voucher gone (its keys expired): nothing to give
	// back, and no key left behind.
	require.NoError(t, c.Del(ctx, keys...).Err())
	released, err = s.Release(ctx, order.Order{ID: a.OrderID + 1, VoucherID: 1, UserID: "bob"}, now)
	require.NoError(t, err)
	require.False(t, released)
	require.Empty(t, keysOf(t, s, "flashsale:{p0}:v:1*"))
}
