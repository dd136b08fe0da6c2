package db_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/order"
)

func TestMain(m *testing.M) { testsrv.Main(m) }

func orders(voucher int64, from, n int) []order.Order {
	now := time.Now().UTC().Truncate(time.Millisecond)
	out := make([]order.Order, n)
	for i := range out {
		out[i] = order.Order{ID: int64(1_000_000 + from + i), VoucherID: voucher, UserID: fmt.Sprintf("u%d", from+i), CreatedAt: now, Day: order.Day(now, time.UTC)}
	}
	return out
}

// Two workers persisting batches of the same hot voucher at once take
// exactly the stock there is, never more.
func TestConcurrentBatchesNeverTakeMoreThanTheStock(t *testing.T) {
	e := testenv.New(t, 1)
	v := e.SeedVoucher(t, db.Voucher{Stock: 100}, -1)
	var wg sync.WaitGroup
	var mu sync.Mutex
	status := map[order.Status]int{}
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range 6 {
				out, err := e.DB.PersistBatch(context.Background(), orders(v.ID, w*1000+b*25, 25))
				for db.Classify(err) == db.ClassOutage { // a deadlock victim retries
					out, err = e.DB.PersistBatch(context.Background(), orders(v.ID, w*1000+b*25, 25))
				}
				require.NoError(t, err)
				mu.Lock()
				for _, o := range out {
					status[o.Status]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Equal(t, map[order.Status]int{order.StatusCreated: 100, order.StatusFailed: 200}, status)
	require.Zero(t, e.Count(t, "SELECT stock FROM vouchers WHERE id = ?", v.ID))
	require.EqualValues(t, 100, e.Count(t, "SELECT COUNT(*) FROM orders WHERE status = 'created'"))
}

func TestPersistBatchSpansVouchersAndSkipsKnownOrders(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	a := e.SeedVoucher(t, db.Voucher{Stock: 3, PaymentTimeoutSeconds: 60}, -1)
	b := e.SeedVoucher(t, db.Voucher{Stock: 3, PaymentTimeoutSeconds: 120}, -1)
	batch := append(orders(a.ID, 0, 2), orders(b.ID, 10, 2)...)
	batch = append(batch, order.Order{ID: 99, VoucherID: 424242, UserID: "x", CreatedAt: batch[0].CreatedAt, Day: batch[0].Day})
	out, err := e.DB.PersistBatch(ctx, batch)
	require.NoError(t, err)
	for _, o := range out[:4] {
		require.Equal(t, order.StatusCreated, o.Status)
		require.False(t, o.Redelivered)
	}
	require.Equal(t, order.StatusFailed, out[4].Status)
	require.Equal(t, db.ReasonVoucherNotFound, out[4].Reason)
	row, err := e.DB.Order(ctx, batch[2].ID)
	require.NoError(t, err)
	require.Equal(t, row.CreatedAt.Add(120*time.Second), row.ExpiresAt)

	// The same batch again: all re-deliveries, nothing written or taken.
	again, err := e.DB.PersistBatch(ctx, batch)
	require.NoError(t, err)
	for i, o := range again {
		require.True(t, o.Redelivered)
		require.Equal(t, out[i].Status, o.Status)
		require.False(t, o.Conflict)
	}
	require.EqualValues(t, 1, e.Count(t, "SELECT stock FROM vouchers WHERE id = ?", a.ID))
	require.EqualValues(t, 5, e.Count(t, "SELECT COUNT(*) FROM orders"))

	// An id already held by another user's order is a conflict, not a re-delivery.
	clash := batch[0]
	clash.UserID = "someone-else"
	out, err = e.DB.PersistBatch(ctx, []order.Order{clash})
	require.NoError(t, err)
	require.True(t, out[0].Conflict)
}

func TestPayOrder(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	v := e.SeedVoucher(t, db.Voucher{Stock: 1}, -1)
	o := orders(v.ID, 0, 2)
	_, err := e.DB.PersistBatch(ctx, o) // the second one fails: no stock
	require.NoError(t, err)
	now := time.Now().UTC().Truncate(time.Millisecond)

	paid, err := e.DB.PayOrder(ctx, o[0].ID, o[0].UserID, now)
	require.NoError(t, err)
	require.Equal(t, "paid", paid.Status)
	require.Equal(t, now, *paid.PaidAt)
	again, err := e.DB.PayOrder(ctx, o[0].ID, o[0].UserID, now.Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, now, *again.PaidAt, "paying twice changes nothing")

	_, err = e.DB.PayOrder(ctx, o[0].ID, "intruder", now)
	require.ErrorIs(t, err, db.ErrNotFound)
	_, err = e.DB.PayOrder(ctx, o[1].ID, o[1].UserID, now)
	require.ErrorIs(t, err, db.ErrNotPayable)
	_, err = e.DB.PayOrder(ctx, 123, "u", now)
	require.ErrorIs(t, err, db.ErrNotFound)
}

// If Redis ever admits a user beyond the limit (it lost its counts), MySQL
// still holds the line.
func TestPersistBatchHoldsThePerUserLimit(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	v := e.SeedVoucher(t, db.Voucher{Stock: 10, PerUserLimit: 2}, -1)
	batch := orders(v.ID, 0, 4)
	for i := range batch {
		batch[i].UserID = "greedy"
	}
	out, err := e.DB.PersistBatch(ctx, batch[:1])
	require.NoError(t, err)
	require.Equal(t, order.StatusCreated, out[0].Status)
	out, err = e.DB.PersistBatch(ctx, batch[1:])
	require.NoError(t, err)
	require.Equal(t, []order.Status{order.StatusCreated, order.StatusFailed, order.StatusFailed}, []order.Status{out[0].Status, out[1].Status, out[2].Status})
	require.Equal(t, db.ReasonUserLimit, out[2].Reason)
	require.EqualValues(t, 8, e.Count(t, "SELECT stock FROM vouchers WHERE id = ?", v.ID), "units of refused orders stay in stock")
}
