package db_test

import (
	"context"
	"testing"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
)

// BenchmarkPersistBatch persists batches of 100 new orders of one voucher
// on one connection (go test -bench PersistBatch ./pkg/db).
func BenchmarkPersistBatch(b *testing.B) {
	e := testenv.New(b, 1)
	v := e.SeedVoucher(b, db.Voucher{Stock: 1_000_000_000 / 1000}, -1)
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		if _, err := e.DB.PersistBatch(ctx, orders(v.ID, i*100, 100)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "orders/s")
}
