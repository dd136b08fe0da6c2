package db_test

import (
	"context"
	"testing"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/testenv"
)

// BenchmarkPersistBatch persists batches of 100 orders of one voucher.
func BenchmarkPersistBatch(b *testing.B) {
	t := &testing.T{}
	_ = t
	e := testenv.New(&testing.T{}, 1)
	v := e.SeedVoucher(&testing.T{}, db.Voucher{Stock: 10_000_000}, -1)
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		if _, err := e.DB.PersistBatch(ctx, orders(v.ID, i*100, 100)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "orders/s")
}
