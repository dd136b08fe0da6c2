package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/persist"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
	"github.com/flashsale/flashsale/pkg/worker"
)

func TestMain(m *testing.M) { testsrv.Main(m) }

func newWorker(t *testing.T, e *testenv.Env, consumer string, batch int) *worker.Worker {
	t.Helper()
	w, err := worker.New(worker.Config{Consumer: consumer, BatchSize: batch, Block: 50 * time.Millisecond, RetryBackoff: 10 * time.Millisecond}, e.RDB, e.DB, zaptest.NewLogger(t))
	require.NoError(t, err)
	return w
}

// admit makes n claims by distinct users and returns the admitted order ids.
func admit(t *testing.T, e *testenv.Env, voucher int64, n int, userPrefix string) []int64 {
	t.Helper()
	var ids []int64
	now := time.Now()
	for i := range n {
		a, err := testrdb.Admitter(e.RDB).Admit(context.Background(), admission.Claim{VoucherID: voucher, UserID: fmt.Sprintf("%s%d", userPrefix, i), Now: now, Day: order.Day(now, time.UTC)})
		require.NoError(t, err)
		ids = append(ids, a.OrderID)
	}
	return ids
}

// admitTogether admits one claim of each user of voucher in one call of
// the admission script: their orders share stream entries (32 an entry).
func admitTogether(t *testing.T, e *testenv.Env, voucher int64, users ...string) []int64 {
	t.Helper()
	now := time.Now()
	claims := make([]admission.Claim, len(users))
	for i, u := range users {
		claims[i] = admission.Claim{VoucherID: voucher, UserID: u, Now: now, Day: order.Day(now, time.UTC)}
	}
	as, errs, err := testrdb.Admitter(e.RDB).AdmitMany(context.Background(), claims)
	require.NoError(t, err)
	ids := make([]int64, len(users))
	for i := range users {
		require.NoError(t, errs[i])
		ids[i] = as[i].OrderID
	}
	return ids
}

// runWorker runs w until the test ends.
func runWorker(t *testing.T, w *worker.Worker) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		assert.NoError(t, w.Run(ctx)) // assert, not require: FailNow belongs to the test's goroutine
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
}

func requireBacklog(t *testing.T, e *testenv.Env, voucher int64, want rdb.Backlog) {
	t.Helper()
	b, err := e.RDB.PartitionBacklog(context.Background(), e.RDB.PartitionOf(voucher))
	require.NoError(t, err)
	want.Partition = b.Partition
	require.Equal(t, want, b)
}

func requireStatus(t *testing.T, e *testenv.Env, voucher int64, status order.Status, want int64) {
	t.Helper()
	require.Equal(t, want, e.Count(t, "SELECT COUNT(*) FROM orders WHERE voucher_id = ? AND status = ?", voucher, status), "orders %s", status)
}

func TestWorkerPersistsBatchesAndAcks(t *testing.T) {
	e := testenv.New(t, 4)
	v := e.SeedVoucher(t, db.Voucher{Stock: 500}, -1)
	ids := admit(t, e, v.ID, 350, "u")
	runWorker(t, newWorker(t, e, "w1", 100))

	testenv.Eventually(t, 10*time.Second, "350 orders", func() bool {
		return e.Count(t, "SELECT COUNT(*) FROM orders WHERE voucher_id = ?", v.ID) == 350
	})
	requireStatus(t, e, v.ID, order.StatusCreated, 350)
	require.Equal(t, int64(150), e.Count(t, "SELECT stock FROM vouchers WHERE id = ?", v.ID))
	for _, id := range ids[:5] {
		o, err := e.DB.Order(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, "created", o.Status)
		require.Equal(t, o.CreatedAt.Add(900*time.Second), o.ExpiresAt)
	}
	testenv.Eventually(t, 5*time.Second, "empty stream", func() bool {
		b, err := e.RDB.PartitionBacklog(context.Background(), e.RDB.PartitionOf(v.ID))
		return err == nil && b.Length == 0 && b.Pending == 0
	})
}

// A read takes whole stream entries, which may carry more orders than
// BatchSize: they are persisted BatchSize orders a transaction, and the
// entry acknowledged once all are.
func TestAnEntryLargerThanABatchIsPersistedInBatches(t *testing.T) {
	e := testenv.New(t, 1)
	v := e.SeedVoucher(t, db.Voucher{Stock: 100}, -1)
	users := make([]string, 20)
	for i := range users {
		users[i] = fmt.Sprint("u", i)
	}
	admitTogether(t, e, v.ID, users...)
	requireBacklog(t, e, v.ID, rdb.Backlog{Length: 1, Orders: 20})
	reg := prometheus.NewRegistry()
	w, err := worker.New(worker.Config{Consumer: "w1", BatchSize: 6, Block: 50 * time.Millisecond, RetryBackoff: 10 * time.Millisecond},
		e.RDB, e.DB, zaptest.NewLogger(t), worker.WithRegistry(reg))
	require.NoError(t, err)
	runWorker(t, w)
	testenv.Eventually(t, 10*time.Second, "the entry persisted and acknowledged", func() bool {
		b, err := e.RDB.PartitionBacklog(context.Background(), 0)
		return err == nil && b == rdb.Backlog{}
	})
	requireStatus(t, e, v.ID, order.StatusCreated, 20)
	require.EqualValues(t, 4, testenv.Metric(t, reg, "flashsale_worker_batch_size"), "transactions of 6, 6, 6 and 2 orders")
}

func TestRedeliveryInsertsAndDeductsNothingTwice(t *testing.T) {
	e := testenv.New(t, 2)
	ctx := context.Background()
	v := e.SeedVoucher(t, db.Voucher{Stock: 20}, -1)
	admit(t, e, v.ID, 10, "u")
	p := e.RDB.PartitionOf(v.ID)

	// A worker reads the batch and commits it, then dies before acking.
	entries, err := e.RDB.ReadGroup(ctx, p, "w1", ">", 100, 10*time.Millisecond)
	require.NoError(t, err)
	require.Len(t, entries, 10)
	orders := make([]order.Order, len(entries))
	for i, en := range entries {
		orders[i] = en.Order
	}
	_, err = e.DB.PersistBatch(ctx, orders)
	require.NoError(t, err)
	requireBacklog(t, e, v.ID, rdb.Backlog{Length: 10, Orders: 10, Pending: 10})

	// Restarted under the same name, it re-reads its pending entries first.
	runWorker(t, newWorker(t, e, "w1", 3))
	testenv.Eventually(t, 5*time.Second, "entries acked", func() bool {
		b, err := e.RDB.PartitionBacklog(ctx, p)
		return err == nil && b.Length == 0 && b.Pending == 0
	})
	requireStatus(t, e, v.ID, order.StatusCreated, 10)
	require.Equal(t, int64(10), e.Count(t, "SELECT stock FROM vouchers WHERE id = ?", v.ID), "stock deducted once")

	// Handing the same entries in again (another delivery) changes nothing.
	reg := prometheus.NewRegistry()
	w2 := persist.NewOrders(persist.Config{Consumer: "w2"}, e.RDB, e.DB, zaptest.NewLogger(t), nil, reg)
	require.NoError(t, w2.Handle(ctx, entries))
	require.Equal(t, int64(10), e.Count(t, "SELECT COUNT(*) FROM orders WHERE voucher_id = ?", v.ID))
	require.Equal(t, int64(10), e.Count(t, "SELECT stock FROM vouchers WHERE id = ?", v.ID))
	require.Equal(t, 10.0, testenv.Metric(t, reg, "flashsale_worker_orders_total", "outcome", "redelivered"))
	require.Zero(t, testenv.Metric(t, reg, "flashsale_worker_orders_total", "outcome", "created"))
}

func TestOrdersMySQLCannotAcceptFailAndAreReleased(t *testing.T) {
	e := testenv.New(t, 2)
	ctx := context.Background()
	// Redis admits 8 units where MySQL has only 5 (the stores drifted).
	v := e.SeedVoucher(t, db.Voucher{Stock: 5, StockTotal: 8}, 8)
	ids := admit(t, e, v.ID, 8, "u")
	entries, err := e.RDB.ReadGroup(ctx, e.RDB.PartitionOf(v.ID), "w1", ">", 100, 10*time.Millisecond)
	require.NoError(t, err)
	w := persist.NewOrders(persist.Config{Consumer: "w1"}, e.RDB, e.DB, zaptest.NewLogger(t), nil, nil)
	require.NoError(t, w.Handle(ctx, entries))

	requireStatus(t, e, v.ID, order.StatusCreated, 5)
	requireStatus(t, e, v.ID, order.StatusFailed, 3)
	require.Equal(t, int64(0), e.Count(t, "SELECT stock FROM vouchers WHERE id = ?", v.ID))
	require.Equal(t, int64(3), e.Count(t, "SELECT COUNT(*) FROM orders WHERE voucher_id = ? AND reason = ?", v.ID, db.ReasonOutOfStock))
	requireBacklog(t, e, v.ID, rdb.Backlog{})

	// Redis got the 3 failed units and their users' counts back.
	stock, _, err := e.RDB.RemainingStock(ctx, v.ID)
	require.NoError(t, err)
	require.EqualValues(t, 3, stock)
	for i, id := range ids {
		o, err := e.DB.Order(ctx, id)
		require.NoError(t, err)
		n, err := e.RDB.UserCount(ctx, v.ID, fmt.Sprintf("u%d", i))
		require.NoError(t, err)
		if o.Status == "failed" {
			require.Zero(t, n, "failed order's user count released")
		} else {
			require.EqualValues(t, 1, n)
		}
	}
	// A re-delivery of the failed orders does not release them twice.
	require.NoError(t, w.Handle(ctx, entries))
	stock, _, err = e.RDB.RemainingStock(ctx, v.ID)
	require.NoError(t, err)
	require.EqualValues(t, 3, stock)
}

func TestNothingIsAckedUntilMySQLCommits(t *testing.T) {
	m := testsrv.NewMariaDB(t)
	dsn, err := m.CreateDatabase("ackaftercommit")
	require.NoError(t, err)
	e := testenv.NewOn(t, 1, dsn)
	ctx := context.Background()
	v := e.SeedVoucher(t, db.Voucher{Stock: 10}, -1)

	require.NoError(t, m.Kill())
	admit(t, e, v.ID, 4, "u")
	w := newWorker(t, e, "w1", 100)
	entries, err := e.RDB.ReadGroup(ctx, 0, "w1", ">", 100, 10*time.Millisecond)
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	require.Error(t, persist.NewOrders(persist.Config{Consumer: "w1"}, e.RDB, e.DB, zaptest.NewLogger(t), nil, nil).Handle(short, entries), "no commit possible")
	requireBacklog(t, e, v.ID, rdb.Backlog{Length: 4, Orders: 4, Pending: 4})

	// MySQL comes back: the worker, restarted, re-reads and finishes them.
	require.NoError(t, m.Start())
	runWorker(t, w)
	testenv.Eventually(t, 15*time.Second, "acked after commit", func() bool {
		b, err := e.RDB.PartitionBacklog(ctx, 0)
		return err == nil && b.Pending == 0 && b.Length == 0
	})
	requireStatus(t, e, v.ID, order.StatusCreated, 4)
}

func TestPoisonAndRejectedOrdersAreDeadLettered(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	v := e.SeedVoucher(t, db.Voucher{Stock: 10}, -1)
	admit(t, e, v.ID, 2, "good")
	stream := rdb.StreamKey(0)
	// Not an order at all.
	require.NoError(t, e.RDB.Client().XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"junk", "1"}}).Err())
	// A creation time no order can have.
	require.NoError(t, e.RDB.Client().XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{
		"voucher_id", v.ID, "user_id", "late", "created_ms", int64(400_000_000_000_000), "day", order.Day(time.Now(), time.UTC)}}).Err())
	// Well-formed, but MySQL refuses it (bytes that are not UTF-8): the whole
	// batch fails, then each order is tried alone.
	require.NoError(t, e.RDB.Client().XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{
		"voucher_id", v.ID, "user_id", "bad\xff\xfe", "created_ms", time.Now().UnixMilli(), "day", order.Day(time.Now(), time.UTC)}}).Err())
	admit(t, e, v.ID, 1, "late")

	runWorker(t, newWorker(t, e, "w1", 100))
	testenv.Eventually(t, 5*time.Second, "stream drained", func() bool {
		b, err := e.RDB.PartitionBacklog(ctx, 0)
		return err == nil && b.Length == 0 && b.Pending == 0
	})
	requireStatus(t, e, v.ID, order.StatusCreated, 3)
	dead, err := e.RDB.Client().XRange(ctx, rdb.DeadKey(0), "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, dead, 3)
	require.Contains(t, dead[0].Values["reason"], "malformed")
	require.Contains(t, dead[1].Values["reason"], "bad created_ms")
	require.Contains(t, dead[2].Values["reason"], "rejected by mysql")
	require.Equal(t, "bad\xff\xfe", dead[2].Values["user_id"])
}

// A worker logs what it persisted, at Info, as the README says each role
// does: the orders by outcome and the batches.
func TestAWorkerLogsItsCounts(t *testing.T) {
	e := testenv.New(t, 1)
	v := e.SeedVoucher(t, db.Voucher{Stock: 3}, -1)
	core, logs := observer.New(zapcore.InfoLevel)
	w, err := worker.New(worker.Config{Consumer: "w", Block: 50 * time.Millisecond}, e.RDB, e.DB, zap.New(core), worker.WithCountsEvery(20*time.Millisecond))
	require.NoError(t, err)
	runWorker(t, w)
	admit(t, e, v.ID, 3, "u")
	sum := func() map[string]int64 {
		got := map[string]int64{}
		for _, l := range logs.FilterMessage("worker counts").All() {
			for k, x := range l.ContextMap() {
				if n, ok := x.(int64); ok {
					got[k] += n
				}
			}
		}
		return got
	}
	// A line counts what was done by its time: the orders and their batch
	// may be counted in two lines, so both are waited for.
	testenv.Eventually(t, 10*time.Second, "three created and their batches in the lines", func() bool {
		got := sum()
		return got["created"] == 3 && got["batches"] > 0
	})
	require.Zero(t, sum()["failed"])
}
