// Package testenv builds the pipeline's stores over throwaway servers for
// integration tests: a redis-server of the test's own and a fresh, migrated
// database on the test binary's mariadbd (see testsrv.Main).
package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/app"
	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/internal/wait"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/settle"
	schema "github.com/flashsale/flashsale/sql"
)

// Env is one test's pipeline state.
type Env struct {
	Common app.Common
	Redis  *testsrv.Redis
	RDB    *rdb.Store
	DB     *db.Store
}

// New returns an Env with partitions stream partitions on a database of the
// shared mariadbd.
func New(t testing.TB, partitions int) *Env {
	t.Helper()
	return NewOn(t, partitions, testsrv.NewDatabase(t))
}

// NewOn is New on the database dsn.
func NewOn(t testing.TB, partitions int, dsn string) *Env {
	t.Helper()
	ctx := context.Background()
	r := testsrv.NewRedis(t)
	c := app.Common{RedisAddr: r.Addr, RedisTimeout: 2 * time.Second, MySQLDSN: dsn, MySQLMaxConns: 16,
		StreamPartitions: partitions, ConsumerGroup: rdb.DefaultGroup, LogLevel: "debug"}
	rs, err := c.Redis(ctx, 32)
	require.NoError(t, err)
	t.Cleanup(func() { rs.Client().Close() })
	ds, err := c.MySQL(ctx)
	require.NoError(t, err)
	sqlDB, err := ds.DB().DB()
	require.NoError(t, err)
	t.Cleanup(func() { sqlDB.Close() })
	_, err = schema.Apply(ctx, sqlDB)
	require.NoError(t, err)
	require.NoError(t, rs.EnsureGroups(ctx))
	// Loaded, as the reaper's restorer marks a fresh Redis on its first
	// pass: an unknown voucher is then not found (404), not an outage.
	require.NoError(t, rs.MarkAllLoaded(ctx))
	return &Env{Common: c, Redis: r, RDB: rs, DB: ds}
}

// SeedVoucher creates v in MySQL and warms Redis with redisStock units
// (redisStock < 0: the same stock as MySQL).
func (e *Env) SeedVoucher(t testing.TB, v db.Voucher, redisStock int64) db.Voucher {
	t.Helper()
	return e.seed(t, v, redisStock, nil)
}

// SeedPool creates a pooled voucher of v.Kind holding items in both stores.
func (e *Env) SeedPool(t testing.TB, v db.Voucher, items []order.Item) db.Voucher {
	t.Helper()
	v.Stock = int64(len(items))
	for _, it := range items {
		v.TotalAmount += it.Amount
	}
	return e.seed(t, v, -1, items)
}

func (e *Env) seed(t testing.TB, v db.Voucher, redisStock int64, items []order.Item) db.Voucher {
	t.Helper()
	ctx := context.Background()
	if v.Name == "" {
		v.Name = "test voucher"
	}
	if v.StockTotal == 0 {
		v.StockTotal = v.Stock
	}
	if v.PerUserLimit == 0 {
		v.PerUserLimit = 1
	}
	if v.PaymentTimeoutSeconds == 0 {
		v.PaymentTimeoutSeconds = 900
	}
	if v.CreatedAt.IsZero() {
		v.CreatedAt = time.Now().UTC().Truncate(time.Millisecond)
	}
	ch, err := e.DB.CreateVoucher(ctx, &v, items, db.ActorAdmin, v.CreatedAt)
	require.NoError(t, err)
	if redisStock < 0 {
		redisStock = v.Stock
	}
	a := settle.RedisVoucher(v, redisStock)
	a.Items = items
	require.NoError(t, e.RDB.PutVoucher(ctx, a))
	require.NoError(t, e.DB.MarkChangesApplied(ctx, []int64{ch.ID}, v.CreatedAt), "the creation reached Redis")
	return v
}

// Count runs a SELECT COUNT(*)-like query returning one integer.
func (e *Env) Count(t testing.TB, query string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, e.DB.DB().Raw(query, args...).Scan(&n).Error)
	return n
}

// Eventually is wait.For: the tests' one way to wait.
func Eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	wait.For(t, timeout, what, cond)
}

// Metric returns the value of the metric name whose labels include labels
// (name, value, name, value, ...) from g: a counter's or gauge's value, a
// histogram's sample count. It fails the test if there is none.
func Metric(t *testing.T, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	families, err := g.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue metrics
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	t.Fatalf("no metric %s%v", name, labels)
	return 0
}
