package persist

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
	"github.com/flashsale/flashsale/pkg/rdb/upkeep"
)

func TestMain(m *testing.M) { testsrv.Main(m) }

// A panic while persisting (a bug) costs only the order that panics on
// its own: the batch is tried again order by order, the others are
// persisted, the one is recorded failed, its unit given back, and
// dead-lettered with the panic as its reason.
func TestAPanicDeadLettersOnlyTheOrderThatPanicsAlone(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	v := e.SeedVoucher(t, db.Voucher{Stock: 10}, -1)
	now := time.Now()
	var ids []int64
	for i := range 3 {
		a, err := testrdb.Admitter(e.RDB).Admit(ctx, admission.Claim{VoucherID: v.ID, UserID: fmt.Sprint("u", i), Now: now, Day: order.Day(now, time.UTC)})
		require.NoError(t, err)
		ids = append(ids, a.OrderID)
	}
	entries, err := e.RDB.ReadGroup(ctx, 0, "w", ">", 100, 10*time.Millisecond)
	require.NoError(t, err)
	require.Len(t, entries, 3)

	o := NewOrders(Config{Consumer: "w"}, e.RDB, e.DB, zaptest.NewLogger(t), nil, nil)
	attempts := 0
	o.attempt = func(ctx context.Context, batch []rdb.StreamOrder) error {
		attempts++
		for _, b := range batch {
			if b.Order.ID == ids[1] {
				panic("a bug meets order " + fmt.Sprint(ids[1]))
			}
		}
		return o.persistOnce(ctx, batch)
	}
	require.NoError(t, o.Handle(ctx, entries))
	require.Equal(t, 4, attempts, "the batch, then each order alone")

	for i, id := range ids {
		got, err := e.DB.Order(ctx, id)
		require.NoError(t, err)
		if i == 1 {
			require.Equal(t, string(order.StatusFailed), got.Status)
		} else {
			require.Equal(t, string(order.StatusCreated), got.Status)
		}
	}
	dead, err := upkeep.New(e.RDB).DeadLetters(ctx, 0)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, fmt.Sprint(ids[1]), dead[0].OrderID)
	require.Contains(t, dead[0].Reason, "panic: a bug meets order")
	stock, _, err := e.RDB.RemainingStock(ctx, v.ID)
	require.NoError(t, err)
	require.EqualValues(t, 8, stock, "the failed order's unit is back")
	b, err := e.RDB.PartitionBacklog(ctx, 0)
	require.NoError(t, err)
	require.Zero(t, b.Length, "every entry acknowledged")
}
