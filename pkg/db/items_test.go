package db_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/order"
)

func pool(amounts ...int64) []order.Item {
	out := make([]order.Item, len(amounts))
	for i, a := range amounts {
		out[i] = order.Item{No: int64(i + 1), Amount: a}
	}
	return out
}

func grabs(v int64, from int, items ...order.Item) []order.Order {
	out := orders(v, from, len(items))
	for i := range out {
		out[i].Item = items[i]
	}
	return out
}

// A grab is persisted completed, holding its envelope; an envelope handed
// out twice (Redis lost its state) stays with its first holder, and the
// second order fails without giving the envelope back.
func TestGrabsHoldTheirEnvelopes(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	items := pool(10, 20, 30)
	v := e.SeedPool(t, db.Voucher{Kind: "envelope"}, items)
	require.EqualValues(t, 60, v.TotalAmount)

	out, err := e.DB.PersistBatch(ctx, grabs(v.ID, 0, items[0], items[1], items[0]))
	require.NoError(t, err)
	require.Equal(t, order.StatusCompleted, out[0].Status)
	require.Equal(t, order.StatusCompleted, out[1].Status)
	require.Equal(t, order.StatusFailed, out[2].Status)
	require.Equal(t, db.ReasonItemTaken, out[2].Reason)
	require.NotNil(t, out[2].Release)
	require.True(t, out[2].Release.Order().Item.IsZero(), "the envelope is someone else's: not given back")

	row, err := e.DB.Order(ctx, out[0].Order.ID)
	require.NoError(t, err)
	require.EqualValues(t, 10, row.Amount)
	require.Equal(t, int64(1), e.Count(t, "SELECT COUNT(*) FROM items WHERE voucher_id = ? AND order_id = ?", v.ID, out[0].Order.ID))

	// Re-delivered: nothing changes.
	again, err := e.DB.PersistBatch(ctx, grabs(v.ID, 0, items[0]))
	require.NoError(t, err)
	require.True(t, again[0].Redelivered)

	a, err := e.DB.VoucherAmounts(ctx, v.ID)
	require.NoError(t, err)
	require.Equal(t, db.Amounts{Grabbed: 30, Remaining: 30}, a)
	free, err := e.DB.FreeItems(ctx, v.ID)
	require.NoError(t, err)
	require.Equal(t, []order.Item{items[2]}, free)
	got, err := e.DB.Voucher(ctx, v.ID)
	require.NoError(t, err)
	require.EqualValues(t, 1, got.Stock)
}

// A code of an order cancelled unpaid goes back to the pool, in MySQL and
// in the release owed to Redis.
func TestACancelledOrderFreesItsCode(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	items := []order.Item{{No: 1, Code: "GIFT-A"}, {No: 2, Code: "GIFT-B"}}
	v := e.SeedPool(t, db.Voucher{Kind: "codes", PaymentTimeoutSeconds: 1}, items)
	out, err := e.DB.PersistBatch(ctx, grabs(v.ID, 0, items[1]))
	require.NoError(t, err)
	require.Equal(t, order.StatusCreated, out[0].Status)

	rels, err := e.DB.CancelExpired(ctx, time.Now().Add(time.Hour), 10)
	require.NoError(t, err)
	require.Len(t, rels, 1)
	require.Equal(t, items[1], rels[0].Order().Item)
	free, err := e.DB.FreeItems(ctx, v.ID)
	require.NoError(t, err)
	require.Equal(t, items, free)

	// Sold again, to another order.
	out, err = e.DB.PersistBatch(ctx, grabs(v.ID, 10, items[1]))
	require.NoError(t, err)
	require.Equal(t, order.StatusCreated, out[0].Status)
}

// Several reapers refund an ended envelope sale at once: exactly one of
// them records the refund, of exactly what nobody grabbed.
func TestARefundHappensOnce(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	items := pool(10, 20, 30, 40)
	v := e.SeedPool(t, db.Voucher{Kind: "envelope"}, items)
	_, err := e.DB.PersistBatch(ctx, grabs(v.ID, 0, items[1]))
	require.NoError(t, err)

	var wg sync.WaitGroup
	var mu sync.Mutex
	var refunds []int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			amount, done, err := e.DB.Refund(ctx, v.ID, time.Now())
			if err != nil {
				t.Error(err)
				return
			}
			if done {
				mu.Lock()
				refunds = append(refunds, amount)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Equal(t, []int64{80}, refunds)
	got, err := e.DB.Voucher(ctx, v.ID)
	require.NoError(t, err)
	require.EqualValues(t, 80, got.RefundedAmount)
	require.NotNil(t, got.RefundedAt)
	require.Zero(t, got.Stock)
	a, err := e.DB.VoucherAmounts(ctx, v.ID)
	require.NoError(t, err)
	require.Equal(t, db.Amounts{Grabbed: 20, Refunded: 80}, a)
	require.Equal(t, got.TotalAmount, a.Grabbed+a.Remaining+a.Refunded)

	// A grab that arrives after the refund cannot take a refunded envelope.
	out, err := e.DB.PersistBatch(ctx, grabs(v.ID, 5, items[0]))
	require.NoError(t, err)
	require.Equal(t, order.StatusFailed, out[0].Status)
}
