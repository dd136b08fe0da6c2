package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/reaper"
	"github.com/flashsale/flashsale/pkg/worker"
)

// storeAs opens the pipeline's MySQL store with another DSN.
func storeAs(t *testing.T, e *testenv.Env, dsn string) *db.Store {
	t.Helper()
	c := e.Common
	c.MySQLDSN = dsn
	d, err := c.MySQL(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() {
		if sqlDB, err := d.DB().DB(); err == nil {
			sqlDB.Close()
		}
	})
	return d
}

func deadLetters(t *testing.T, e *testenv.Env, p int) []redis.XMessage {
	t.Helper()
	dead, err := e.RDB.Client().XRange(context.Background(), rdb.DeadKey(p), "-", "+").Result()
	require.NoError(t, err)
	return dead
}

func redisStock(t *testing.T, e *testenv.Env, v int64) int64 {
	t.Helper()
	stock, _, err := e.RDB.RemainingStock(context.Background(), v)
	require.NoError(t, err)
	return stock
}

// A managed-MySQL failover makes the server read-only for a while. Orders
// admitted meanwhile wait, however many attempts it takes, and are created
// once writes are accepted again: none failed, none dead-lettered, no unit
// given back; and the reaper claims nothing while writes are refused, so
// no delivery count grows towards the dead-letter stream.
func TestReadOnlyMySQLLosesNothing(t *testing.T) {
	m := testsrv.NewMariaDBWithGrants(t)
	rootDSN, err := m.CreateDatabase("readonly")
	require.NoError(t, err)
	e := testenv.NewOn(t, 1, rootDSN)
	userDSN, err := testsrv.RestrictedUser(rootDSN)
	require.NoError(t, err)
	store := storeAs(t, e, userDSN)
	ctx := context.Background()
	v := e.SeedVoucher(t, db.Voucher{Stock: 100}, -1)

	require.NoError(t, testsrv.SetReadOnly(rootDSN, true))
	t.Cleanup(func() { _ = testsrv.SetReadOnly(rootDSN, false) })
	ids := admit(t, e, v.ID, 60, "u")

	reg := prometheus.NewRegistry()
	w, err := worker.New(worker.Config{Consumer: "w1", BatchSize: 25, Block: 20 * time.Millisecond, RetryBackoff: 5 * time.Millisecond,
		MaxAttempts: 2, TakeoverMinIdle: 300 * time.Millisecond}, e.RDB, store, zaptest.NewLogger(t), worker.WithRegistry(reg))
	require.NoError(t, err)
	runWorker(t, w)
	rp, err := reaper.New(reaper.Config{Config: worker.Config{Consumer: "reaper", TakeoverMinIdle: 300 * time.Millisecond, Block: 20 * time.Millisecond},
		MaxDeliveries: 1, ConsumerGoneAfter: time.Hour}, e.RDB, store, zaptest.NewLogger(t))
	require.NoError(t, err)

	// Well past MaxAttempts, and past several claim min-idles.
	testenv.Eventually(t, 60*time.Second, "10 failed attempts", func() bool {
		return testenv.Metric(t, reg, "flashsale_worker_batch_retries_total") >= 10
	})
	for range 3 {
		// The worker keeps trying the batch it holds: time moves on, the
		// outage goes on (a state, waited on; not a sleep).
		tried := testenv.Metric(t, reg, "flashsale_worker_batch_retries_total")
		testenv.Eventually(t, 30*time.Second, "another attempt at the batch", func() bool {
			return testenv.Metric(t, reg, "flashsale_worker_batch_retries_total") > tried
		})
		results, err := rp.RunOnce(ctx)
		require.ErrorContains(t, err, "refuses writes")
		require.Zero(t, results.Rescuer.TakenOver+results.Rescuer.DeadLettered, "the reaper touched entries during the outage")
	}
	var roErr *mysql.MySQLError
	require.ErrorAs(t, store.Writable(ctx, "check"), &roErr)
	require.EqualValues(t, db.ErrNumReadOnly, roErr.Number)
	require.Zero(t, e.Count(t, "SELECT COUNT(*) FROM orders"))
	require.Empty(t, deadLetters(t, e, 0))
	require.EqualValues(t, 40, redisStock(t, e, v.ID), "no unit given back during the outage")
	require.Zero(t, testenv.Metric(t, reg, "flashsale_worker_entries_abandoned_total"))

	require.NoError(t, testsrv.SetReadOnly(rootDSN, false))
	testenv.Eventually(t, 60*time.Second, "60 orders created", func() bool {
		return e.Count(t, "SELECT COUNT(*) FROM orders WHERE voucher_id = ? AND status = ?", v.ID, order.StatusCreated) == 60
	})
	testenv.Eventually(t, 10*time.Second, "stream drained", func() bool {
		b, err := e.RDB.PartitionBacklog(ctx, 0)
		return err == nil && b.Length == 0 && b.Pending == 0
	})
	for _, id := range ids {
		o, err := e.DB.Order(ctx, id)
		require.NoError(t, err)
		require.Equal(t, "created", o.Status)
	}
	require.Zero(t, e.Count(t, "SELECT COUNT(*) FROM orders WHERE status <> 'created'"))
	require.Zero(t, e.Count(t, "SELECT COUNT(*) FROM releases"))
	require.Empty(t, deadLetters(t, e, 0))
	require.EqualValues(t, 40, redisStock(t, e, v.ID))
	require.EqualValues(t, 40, e.Count(t, "SELECT stock FROM vouchers WHERE id = ?", v.ID))
}

// Errors that are not about a row's values are taken as outages, but they
// are no outage while MySQL takes other writes: here the driver's packet
// too large (for a whole batch) and a CHECK constraint someone added that
// refuses one user. The batch is not retried for ever: after MaxAttempts it
// is tried order by order, which persists all that can be, and the stream
// entry holding the one order that can never be written is left to the
// reaper, which dead-letters that order alone at MaxDeliveries: the 30
// orders that shared its stream entry are persisted. MySQL cannot record
// its failure (the same CHECK), so its unit is not given back.
func TestABatchThatCannotSucceedDoesNotStallItsPartition(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	v := e.SeedVoucher(t, db.Voucher{Stock: 100}, -1)
	cfg, err := mysql.ParseDSN(e.Common.MySQLDSN)
	require.NoError(t, err)
	cfg.MaxAllowedPacket = 2048 // a batch of 30 does not fit, one order does
	store := storeAs(t, e, cfg.FormatDSN())

	require.NoError(t, e.DB.DB().Exec("ALTER TABLE orders ADD CONSTRAINT no_evil CHECK (user_id <> 'evil0')").Error)
	users := []string{"evil0"}
	for i := range 15 {
		users = append(users, fmt.Sprint("a", i), fmt.Sprint("b", i))
	}
	admitTogether(t, e, v.ID, users...)
	b, err := e.RDB.PartitionBacklog(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, rdb.Backlog{Length: 1, Orders: 31}, b, "one stream entry")

	reg := prometheus.NewRegistry()
	w, err := worker.New(worker.Config{Consumer: "w1", BatchSize: 40, Block: 20 * time.Millisecond, RetryBackoff: 5 * time.Millisecond,
		MaxAttempts: 3, TakeoverMinIdle: 300 * time.Millisecond}, e.RDB, store, zaptest.NewLogger(t), worker.WithRegistry(reg))
	require.NoError(t, err)
	runWorker(t, w)
	testenv.Eventually(t, 30*time.Second, "30 orders created", func() bool {
		return e.Count(t, "SELECT COUNT(*) FROM orders WHERE voucher_id = ? AND status = 'created'", v.ID) == 30
	})
	require.EqualValues(t, 1, testenv.Metric(t, reg, "flashsale_worker_entries_abandoned_total"))

	// New orders keep flowing past the abandoned entry.
	admit(t, e, v.ID, 5, "c")
	testenv.Eventually(t, 30*time.Second, "35 orders created", func() bool {
		return e.Count(t, "SELECT COUNT(*) FROM orders WHERE voucher_id = ? AND status = 'created'", v.ID) == 35
	})

	rp, err := reaper.New(reaper.Config{Config: worker.Config{Consumer: "reaper", TakeoverMinIdle: 300 * time.Millisecond, Block: 20 * time.Millisecond},
		MaxDeliveries: 2, ConsumerGoneAfter: time.Hour}, e.RDB, store, zaptest.NewLogger(t))
	require.NoError(t, err)
	testenv.Eventually(t, 60*time.Second, "the entry dead-lettered", func() bool {
		_, _ = rp.RunOnce(ctx)
		return len(deadLetters(t, e, 0)) == 1
	})
	dead := deadLetters(t, e, 0)
	require.Contains(t, dead[0].Values["reason"], "failure not recorded")
	require.Equal(t, "evil0", dead[0].Values["user_id"], "the bad order alone")
	b, err = e.RDB.PartitionBacklog(ctx, 0)
	require.NoError(t, err)
	require.Zero(t, b.Length+b.Orders+b.Pending)
	require.Zero(t, e.Count(t, "SELECT COUNT(*) FROM orders WHERE status = 'failed'"))
	require.Zero(t, e.Count(t, "SELECT COUNT(*) FROM releases"))
	require.EqualValues(t, 64, redisStock(t, e, v.ID), "the unrecorded order keeps its unit")
	require.EqualValues(t, 65, e.Count(t, "SELECT stock FROM vouchers WHERE id = ?", v.ID))
}
