package reaper

// The restorer: a Redis that comes back empty (restarted without
// persistence, or a master whose replicas resynced from it after it
// restarted empty) has lost every voucher, and with them every
// partition's loaded mark (rdb.LoadedKey). A claim of a voucher missing
// from an unloaded partition answers 503, not 404 (admit.lua). Each round
// reads the marks, one EXISTS per partition; where one is missing, every
// voucher MySQL has on sale there that Redis no longer holds is rebuilt
// by reconcile's repair (stock: MySQL's remaining less the orders still in
// the streams; each user's units from MySQL's live orders and the
// streams), and the partition is marked loaded again.
//
// A voucher Redis still holds is not touched: claims may be admitting
// it, and a rewrite would overwrite them. Nor is one a gateway creates
// while the round reads (a voucher just created is in MySQL before it is
// in Redis): the rebuild writes only the buckets still absent, each under
// WATCH (rdb.Store.RestoreVoucher). A hot voucher of which only
// some buckets are gone (one master of a cluster lost its data) is not
// rebuilt either, for the same reason: it is logged, its partitions stay
// unmarked (its missing buckets answer 503), and an operator runs
// `reaper reconcile --repair` with its sale paused. One just created
// whose bucket 0 is the only one missing is a creation under way: the
// round waits for it (awaitCreation) and says nothing.
//
// The same round completes each partition's rooms' index (rdb.RoomsKey)
// where it lacks its mark: Redis lost it, or the vouchers were written by
// a version that kept none. Every voucher on sale there is indexed from
// its hash, then the index is marked complete; until then the gateways
// ask Redis about that partition's ids, as they did without an index.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/backoff"
	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// RestorerResult is what a round of the restorer did.
type RestorerResult struct {
	// Restored are the vouchers on sale rebuilt in a Redis that had lost
	// them.
	Restored int `log:"restored"`
}

// restore is the restorer's round.
func (r *Reaper) restore(ctx context.Context, res *RestorerResult) error {
	unloaded, err := r.redis.Unloaded(ctx)
	if err != nil {
		return err
	}
	unindexed, err := r.redis.UnindexedRooms(ctx)
	if err != nil || len(unloaded)+len(unindexed) == 0 {
		return err
	}
	now := r.now()
	vouchers, err := r.db.ActiveVouchers(ctx, now, rdb.KeysOutliveSale)
	if err != nil {
		return err
	}
	if len(unloaded) > 0 {
		if err := r.reload(ctx, res, unloaded, vouchers); err != nil {
			return err
		}
	}
	if len(unindexed) == 0 {
		return nil
	}
	ids := make([]int64, len(vouchers))
	for i, v := range vouchers {
		ids[i] = v.ID
	}
	return r.redis.IndexRooms(ctx, unindexed, ids)
}

// reload rebuilds the vouchers of the unloaded partitions that Redis lost
// whole, and marks those partitions loaded.
func (r *Reaper) reload(ctx context.Context, res *RestorerResult, unloaded []int, vouchers []db.Voucher) error {
	now := r.now()
	streams := streamCache{}
	held := map[int]bool{} // partitions left unmarked: a voucher there needs an operator
	for _, v := range vouchers {
		parts := r.redis.VoucherPartitions(v.ID, v.StockBuckets)
		if !slices.ContainsFunc(parts, func(p int) bool { return slices.Contains(unloaded, p) }) {
			continue
		}
		present, zero, err := r.redis.PresentBuckets(ctx, v.ID, v.StockBuckets)
		if err != nil {
			return err
		}
		if present > 0 && !zero && now.Sub(v.CreatedAt) < creatingFor {
			// A voucher just created, its buckets written but bucket 0,
			// which goes last: a gateway's creation under way, not a loss.
			if present, zero, err = r.awaitCreation(ctx, v); err != nil {
				return err
			}
		}
		switch {
		case present == max(v.StockBuckets, 1):
			continue
		case present > 0:
			r.log.Error("redis lost some buckets of a voucher, not all: pause its sale and run reaper reconcile --repair",
				zap.Int64("voucher_id", v.ID), zap.Int("buckets", v.StockBuckets), zap.Int("present", present))
			for _, p := range parts {
				held[p] = true
			}
			continue
		}
		entries, err := streams.of(ctx, r.redis, parts)
		if err != nil {
			return err
		}
		if r.signals.lost != nil {
			r.signals.lost(v.ID)
		}
		check, err := reconcileVoucher(ctx, r.redis, r.db, v, entries, now, restoreLost)
		if err != nil {
			return fmt.Errorf("rebuild voucher %d: %w", v.ID, err)
		}
		if check.Repaired {
			res.Restored++
			r.log.Warn("redis had lost a voucher on sale: rebuilt from mysql and the streams",
				zap.Int64("voucher_id", v.ID), zap.Int("in_flight", check.InFlight))
		}
	}
	marked := slices.DeleteFunc(unloaded, func(p int) bool { return held[p] })
	return r.redis.MarkLoaded(ctx, marked...)
}

// A voucher created less than creatingFor ago whose buckets Redis holds
// but for bucket 0 is being written by the gateway that created it
// (rdb.Store.CreateVoucher writes bucket 0 last; no claim is admitted
// before it exists, since a claim reads the voucher's layout there). The
// restorer waits up to creationWait for bucket 0, within its round, before
// it calls the voucher half lost: a creation is a write to each bucket,
// milliseconds apart. One that does not finish (its gateway died, or
// Redis lost the rest) is what it was: logged, its partitions unmarked.
const (
	creatingFor  = time.Minute
	creationWait = 3 * time.Second
)

// awaitCreation waits for voucher v's creation to write all its buckets,
// up to creationWait, and says what Redis then holds.
func (r *Reaper) awaitCreation(ctx context.Context, v db.Voucher) (present int, zero bool, err error) {
	if r.signals.creating != nil {
		r.signals.creating(v.ID)
	}
	deadline := time.Now().Add(creationWait)
	for {
		if present, zero, err = r.redis.PresentBuckets(ctx, v.ID, v.StockBuckets); err != nil || zero || time.Now().After(deadline) {
			return present, zero, err
		}
		if err := backoff.Sleep(ctx, 20*time.Millisecond); err != nil {
			return present, zero, err
		}
	}
}
