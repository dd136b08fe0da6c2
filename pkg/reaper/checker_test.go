package reaper_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/reaper"
	"github.com/flashsale/flashsale/pkg/worker"
)

// The checker turns a disagreement of the stores into a metric, for a
// voucher that is not admitting; one on sale is left alone (a claim in
// flight between reconcile's reads is no disagreement).
func TestCheckerExportsStoreDifferences(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	ends := time.Now().Add(time.Hour)
	over := e.SeedVoucher(t, db.Voucher{Stock: 5, EndsAt: &ends}, 3) // Redis lost 2 units
	onSale := e.SeedVoucher(t, db.Voucher{Stock: 5}, 4)
	require.NotZero(t, onSale.ID)
	reg := prometheus.NewRegistry()
	later := func() time.Time { return ends.Add(time.Minute) }
	r, err := reaper.New(reaper.Config{Config: worker.Config{Consumer: "checker"}}, e.RDB, e.DB, zaptest.NewLogger(t),
		reaper.WithRegistry(reg), reaper.WithClock(later))
	require.NoError(t, err)
	_, err = r.RunOnce(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, testenv.Metric(t, reg, "flashsale_reconcile_vouchers_differing"))
	require.EqualValues(t, 1, testenv.Metric(t, reg, "flashsale_reconcile_differences"), "the stock of the ended one")
	require.Positive(t, testenv.Metric(t, reg, "flashsale_reconcile_last_check_timestamp_seconds"))

	_, err = reaper.Reconcile(ctx, e.RDB, e.DB, later(), true)
	require.NoError(t, err)
	_, err = r.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, testenv.Metric(t, reg, "flashsale_reconcile_differences"), "repaired")
	n, _, err := e.RDB.RemainingStock(ctx, over.ID)
	require.NoError(t, err)
	require.EqualValues(t, 5, n)
}
