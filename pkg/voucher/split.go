package voucher

import (
	"time"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// Split checks a split of voucher v's buckets to to while its sale runs
// (PATCH stock_buckets, or the reaper's detector for a hot voucher): a
// count of units with no waiting room, raised to a multiple of its
// buckets now (each bucket splits into as many: rdb's split.go), at most
// rdb.MaxBuckets, no other split under way, the sale not ended at now.
func Split(v db.Voucher, to int64, now time.Time) error {
	n := int64(max(v.StockBuckets, 1))
	switch {
	case v.EndsAt != nil && !now.Before(*v.EndsAt):
		return invalid("stock_buckets", "stock_buckets cannot change once the sale has ended")
	case v.IsDraw():
		return invalid("stock_buckets", "stock_buckets must be 1 for a draw: entries take no stock")
	case !v.Traits().Spread:
		return invalid("stock_buckets", "stock_buckets must be 1 for a "+v.Kind+" voucher: only a count of units is spread over buckets")
	case v.WaitingRoom != "":
		return invalid("stock_buckets", "stock_buckets must be 1 with a waiting room: the room meters the claims, so the stock need not be spread")
	case to > rdb.MaxBuckets:
		return invalid("stock_buckets", "stock_buckets must be at most "+itoa(rdb.MaxBuckets))
	case v.Splitting() && to != int64(v.SplitTo):
		return invalid("stock_buckets", "stock_buckets: a split to "+itoa(int64(v.SplitTo))+" is under way")
	case to <= n && !v.Splitting():
		return invalid("stock_buckets", "stock_buckets must be more than "+itoa(n)+": buckets are only raised")
	case to%n != 0:
		return invalid("stock_buckets", "stock_buckets must be a multiple of "+itoa(n)+": each bucket splits into as many")
	}
	return nil
}
