package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/internal/wait"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
	"github.com/flashsale/flashsale/pkg/worker"
)

// The worker's connections to MySQL and to Redis are reset, or stop
// answering, in the middle of batches, while orders keep being admitted.
// Answers are what the faults drop: MySQL commits a batch the worker never
// hears committed, Redis acknowledges what the worker thinks failed. Every
// admitted order still ends created exactly once: none failed, released or
// dead-lettered, and the stock agrees in both stores.
func TestConnectionsThatResetOrStallMidBatchLoseNothing(t *testing.T) {
	e := testenv.New(t, 2)
	ctx := context.Background()
	const stock = 100_000
	v := e.SeedVoucher(t, db.Voucher{Stock: stock}, -1)

	cfg, err := mysql.ParseDSN(e.Common.MySQLDSN)
	require.NoError(t, err)
	mysqlProxy := testsrv.NewProxy(t, cfg.Addr)
	cfg.Addr = mysqlProxy.Addr
	cfg.ReadTimeout, cfg.WriteTimeout = time.Second, time.Second
	store := storeAs(t, e, cfg.FormatDSN())
	redisProxy := testsrv.NewProxy(t, e.Redis.Addr)
	rc := e.Common
	rc.RedisAddr, rc.RedisTimeout = redisProxy.Addr, 500*time.Millisecond
	rs, err := rc.Redis(ctx, 16)
	require.NoError(t, err)
	t.Cleanup(func() { rs.Client().Close() })

	reg := prometheus.NewRegistry()
	w, err := worker.New(worker.Config{Consumer: "w1", BatchSize: 10, Block: 20 * time.Millisecond, RetryBackoff: 5 * time.Millisecond,
		TakeoverMinIdle: 30 * time.Second}, rs, store, zaptest.NewLogger(t), worker.WithRegistry(reg))
	require.NoError(t, err)
	runWorker(t, w)

	// Claims keep coming (straight to Redis, not through the proxy).
	var mu sync.Mutex
	var ids []int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			now := time.Now()
			a, err := testrdb.Admitter(e.RDB).Admit(ctx, admission.Claim{VoucherID: v.ID, UserID: fmt.Sprintf("u%d", i), Now: now, Day: order.Day(now, time.UTC)})
			if err != nil {
				t.Errorf("admit: %v", err)
				return
			}
			mu.Lock()
			ids = append(ids, a.OrderID)
			mu.Unlock()
			time.Sleep(time.Millisecond) // a steady stream, not a flood
		}
	}()
	created := func() int64 {
		return e.Count(t, "SELECT COUNT(*) FROM orders WHERE voucher_id = ?", v.ID)
	}
	retries := func() float64 { return testenv.Metric(t, reg, "flashsale_worker_batch_retries_total") }

	faults := []struct {
		name   string
		proxy  *testsrv.Proxy
		inject func() error
	}{
		{"mysql reset", mysqlProxy, mysqlProxy.Reset},
		{"mysql stall", mysqlProxy, mysqlProxy.Stall},
		{"redis reset", redisProxy, redisProxy.Reset},
		{"redis stall", redisProxy, redisProxy.Stall},
	}
	for _, f := range faults {
		// Until the fault has failed a batch in hand: one injected while
		// the worker waits on a read fails the read, not a batch.
		hit := false
		for try := 0; try < 20 && !hit; try++ {
			before := retries()
			require.NoError(t, f.inject())
			hit = wait.Until(ctx, 3*time.Second, "a batch hitting the fault", func() (bool, string) { return retries() > before, "" }) == nil
			f.proxy.Heal()
			n := created()
			testenv.Eventually(t, 30*time.Second, "progress after "+f.name, func() bool { return created() > n })
		}
		require.True(t, hit, "%s never hit a batch", f.name)
	}
	close(stop)
	wg.Wait()

	mu.Lock()
	admitted := ids
	mu.Unlock()
	n := int64(len(admitted))
	testenv.Eventually(t, 60*time.Second, "every admitted order persisted", func() bool { return created() == n })
	testenv.Eventually(t, 10*time.Second, "streams drained", func() bool {
		for p := range 2 {
			b, err := e.RDB.PartitionBacklog(ctx, p)
			if err != nil || b.Length+b.Pending > 0 {
				return false
			}
		}
		return true
	})
	persisted, err := e.DB.ExistingOrders(ctx, admitted)
	require.NoError(t, err)
	require.Len(t, persisted, len(admitted), "every 202 is an order")
	require.Equal(t, n, e.Count(t, "SELECT COUNT(*) FROM orders WHERE status = 'created'"))
	require.Zero(t, e.Count(t, "SELECT COUNT(*) FROM releases"))
	for p := range 2 {
		require.Empty(t, deadLetters(t, e, p))
	}
	require.EqualValues(t, stock-n, redisStock(t, e, v.ID))
	require.EqualValues(t, stock-n, e.Count(t, "SELECT stock FROM vouchers WHERE id = ?", v.ID))
	require.Positive(t, testenv.Metric(t, reg, "flashsale_worker_orders_total", "outcome", "redelivered"),
		"some batch committed without the worker hearing of it")
	t.Logf("%d orders admitted through 4 faults, %v failed attempts, %v redelivered", n, retries(),
		testenv.Metric(t, reg, "flashsale_worker_orders_total", "outcome", "redelivered"))
}
