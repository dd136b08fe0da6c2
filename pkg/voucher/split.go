package voucher

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// Split checks a split of voucher v's buckets to to while its sale runs
// (PATCH stock_buckets, or the reaper's detector for a hot voucher): a
// count of units with no waiting room, raised to a multiple of its
// buckets now (each bucket splits into as many: pkg/rdb/split), at most
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

// Spread refuses a split to to whose buckets the cluster's masters would
// not share evenly (sp, rdb.Store.BucketSpread; nil on one Redis: no
// refusal), naming how they would sit and the nearest counts that would
// share them: a split by hand is there to spread a hot voucher's claims
// over the masters, and one that piles them on some masters does not.
func Spread(to int64, sp *rdb.Spread) error {
	if sp == nil || sp.Even {
		return nil
	}
	masters := make([]string, 0, len(sp.ByMaster))
	for m := range sp.ByMaster {
		masters = append(masters, m)
	}
	slices.SortFunc(masters, func(a, b string) int { return cmp.Or(cmp.Compare(sp.ByMaster[b], sp.ByMaster[a]), cmp.Compare(a, b)) })
	var on []string
	for _, m := range masters {
		switch n := sp.ByMaster[m]; n {
		case 0:
			on = append(on, "none on "+m)
		case 1:
			on = append(on, "1 bucket on "+m)
		default:
			on = append(on, itoa(int64(n))+" buckets on "+m)
		}
	}
	msg := "stock_buckets " + itoa(to) + " would put " + strings.Join(on, ", ") + ": the " + itoa(int64(len(masters))) + " masters would not share them evenly; "
	switch {
	case sp.Below > 0 && sp.Above > 0:
		msg += "the nearest counts that would are " + itoa(int64(sp.Below)) + " and " + itoa(int64(sp.Above))
	case sp.Below > 0:
		msg += "the nearest count that would is " + itoa(int64(sp.Below))
	case sp.Above > 0:
		msg += "the nearest count that would is " + itoa(int64(sp.Above))
	default:
		msg += "no count up to " + itoa(rdb.MaxBuckets) + " would (FLASHSALE_STREAM_PARTITIONS places the buckets: more partitions spread them finer)"
	}
	return invalid("stock_buckets", msg)
}
