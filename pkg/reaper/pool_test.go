package reaper_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
	"github.com/flashsale/flashsale/pkg/reaper"
)

// Redis loses a code pool mid-sale, with grabs persisted, one cancelled
// (its release still owed) and one in flight: reconcile rebuilds the pool
// from MySQL's free codes less the one in flight, and every code is then
// sold exactly once more.
func TestReconcileRebuildsAPool(t *testing.T) {
	e := testenv.New(t, 2)
	ctx := context.Background()
	items := []order.Item{{No: 1, Code: "A"}, {No: 2, Code: "B"}, {No: 3, Code: "C"}, {No: 4, Code: "D"}, {No: 5, Code: "E"}}
	v := e.SeedPool(t, db.Voucher{Kind: "codes", PaymentTimeoutSeconds: 60}, items)
	admit(t, e, v.ID, "u0", "u1")
	persistVoucher(t, e, v.ID)
	_, err := e.DB.CancelExpired(ctx, time.Now().Add(time.Hour), 1) // u0's code is free again, owed to Redis
	require.NoError(t, err)
	admit(t, e, v.ID, "u2") // in flight: takes C

	checks, err := reaper.Reconcile(ctx, e.RDB, e.DB, time.Now(), false)
	require.NoError(t, err)
	require.Empty(t, checks[0].Differences, "settling the owed release is all it takes")

	// The voucher's keys go (the stream stays, with C in flight).
	keys, err := e.RDB.Client().Keys(ctx, "flashsale:*:v:"+strconv.FormatInt(v.ID, 10)+"*").Result()
	require.NoError(t, err)
	require.NoError(t, e.RDB.Client().Del(ctx, keys...).Err())
	checks, err = reaper.Reconcile(ctx, e.RDB, e.DB, time.Now(), true)
	require.NoError(t, err)
	require.True(t, checks[0].Repaired)
	require.NotEmpty(t, checks[0].Differences)

	st, err := e.RDB.ReadVoucherState(ctx, v.ID, nil)
	require.NoError(t, err)
	require.True(t, st.Voucher.Pooled)
	require.ElementsMatch(t, []order.Item{items[0], items[3], items[4]}, st.Voucher.Items, "A (cancelled), D and E; not B (held) nor C (in flight)")
	require.EqualValues(t, 3, st.Voucher.Stock)

	sold := map[string]bool{}
	for _, u := range []string{"n1", "n2", "n3", "n4"} {
		a, err := testrdb.Admitter(e.RDB).Admit(ctx, admission.Claim{VoucherID: v.ID, UserID: u, Now: time.Now(), Day: order.Day(time.Now(), time.UTC)})
		if errors.Is(err, rdb.ErrSoldOut) {
			continue
		}
		require.NoError(t, err)
		require.False(t, sold[a.Item.Code])
		sold[a.Item.Code] = true
	}
	require.Len(t, sold, 3)
	checks, err = reaper.Reconcile(ctx, e.RDB, e.DB, time.Now(), false)
	require.NoError(t, err)
	require.Empty(t, checks[0].Differences)
}
