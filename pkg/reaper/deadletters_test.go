package reaper_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
	"github.com/flashsale/flashsale/pkg/rdb/upkeep"
)

// A dead letter whose order MySQL never recorded (its unit still held in
// Redis) is requeued once the cause is fixed: persisted, and gone from the
// dead letters. One whose order is final in MySQL is left alone.
func TestRequeueDeadLetters(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	v := e.SeedVoucher(t, db.Voucher{Stock: 10, PerUserLimit: 1}, -1)
	ids := admit(t, e, v.ID, "lost", "final")
	entries := readAndDie(t, e, v.ID, "w")
	// The first was dead-lettered with no record in MySQL; the second is
	// in MySQL (created) though dead-lettered too.
	for _, en := range entries {
		require.NoError(t, e.RDB.DeadLetter(ctx, en, "test: rejected"))
	}
	require.NoError(t, e.RDB.Ack(ctx, 0, entries))
	_, err := e.DB.PersistBatch(ctx, []order.Order{entries[1].Order})
	require.NoError(t, err)

	dead, err := upkeep.New(e.RDB).DeadLetters(ctx, 0)
	require.NoError(t, err)
	require.Len(t, dead, 2)
	require.Equal(t, "test: rejected", dead[0].Reason)
	require.NoError(t, dead[0].Order.Err)

	r := newReaper(t, e, "reaper-1", time.Now)
	res, err := r.RequeueDeadLetters(ctx, 0)
	require.NoError(t, err)
	require.Len(t, res, 2)
	require.Equal(t, "persisted", res[0].Result)
	require.Equal(t, "created", res[0].Status)
	require.Equal(t, "skipped", res[1].Result)
	require.Equal(t, "created", res[1].Status)

	o, err := e.DB.Order(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, "created", o.Status)
	dead, err = upkeep.New(e.RDB).DeadLetters(ctx, 0)
	require.NoError(t, err)
	require.Len(t, dead, 1, "the final one stays for purge")
	require.Equal(t, ids[1], dead[0].Order.Order.ID)
	require.EqualValues(t, 8, redisStock(t, e, v.ID), "nothing given back or taken twice")
	require.EqualValues(t, 8, e.Count(t, "SELECT stock FROM vouchers WHERE id = ?", v.ID))

	// Requeueing again changes nothing.
	res, err = r.RequeueDeadLetters(ctx, 0, dead[0].DeadID)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Equal(t, "skipped", res[0].Result)
	require.NoError(t, upkeep.New(e.RDB).DeleteDeadLetters(ctx, 0, dead[0].DeadID))
	b, err := e.RDB.PartitionBacklog(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, rdb.Backlog{Partition: 0}, b)
}

// Requeueing an order whose stream entry is still pending with another
// order (a worker dead-lettered one, then failed before acknowledging the
// entry) persists that order and leaves the entry alone: acknowledging it
// would lose its other order.
func TestRequeueLeavesAPendingEntryToItsConsumer(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	v := e.SeedVoucher(t, db.Voucher{Stock: 10, PerUserLimit: 1}, -1)
	now := time.Now()
	_, errs, err := testrdb.Admitter(e.RDB).AdmitMany(ctx, []admission.Claim{{VoucherID: v.ID, UserID: "dead", Now: now, Day: order.Day(now, time.UTC)},
		{VoucherID: v.ID, UserID: "mate", Now: now, Day: order.Day(now, time.UTC)}})
	require.NoError(t, err)
	require.NoError(t, errors.Join(errs...))
	entries := readAndDie(t, e, v.ID, "w")
	require.Len(t, entries, 2)
	require.Equal(t, entries[0].StreamID, entries[1].StreamID, "one stream entry")
	require.NoError(t, e.RDB.DeadLetter(ctx, entries[0], "test: rejected"))

	res, err := newReaper(t, e, "reaper-1", time.Now).RequeueDeadLetters(ctx, 0)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Equal(t, "persisted", res[0].Result)
	b, err := e.RDB.PartitionBacklog(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, rdb.Backlog{Length: 1, Orders: 2, Pending: 1}, b, "the entry still waits for its consumer")

	// Its consumer (or the reaper) persists it: the requeued order found
	// persisted, its mate persisted now.
	rescuer := newReaper(t, e, "reaper-2", time.Now)
	testenv.Eventually(t, 10*time.Second, "the entry taken over and persisted", func() bool {
		_, err := rescuer.RunOnce(ctx)
		require.NoError(t, err)
		return e.Count(t, "SELECT COUNT(*) FROM orders WHERE voucher_id = ? AND status = 'created'", v.ID) == 2
	})
	b, err = e.RDB.PartitionBacklog(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, rdb.Backlog{}, b)
}
