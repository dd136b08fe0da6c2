package reaper

// The trimmer: what a sale leaves in Redis. Each admission appends its
// position to its user's index in the voucher's hash (o:USER, which a
// listing of the user's orders not yet persisted reads, pending.lua);
// during the sale nobody prunes it but those listings, because pruning on
// every acknowledgement costs the Redis the claims share a read and a
// write an order. Once the sale has ended, the trimmer drops every index
// whose orders have all been persisted (upkeep.Indexes.Trim), a few
// hundred users a script call, and marks the voucher's buckets so it does
// not read them again.
//
// It also forgets released orders. A bucket's set of released orders makes
// a second release of an order a no-op (release.lua); once MySQL has
// recorded a release done, only a caller that read it owed before that can
// ask for it again. settle.ForgetAfter later, the trimmer drops those ids
// (forget.lua), raising the bucket's cutoff first, so that such a caller
// is refused and reads MySQL again rather than giving the units twice: the
// sets hold the last minutes' releases, not every cancellation of a sale.
// It reads the releases in the order MySQL recorded them (releases_owed's
// index), from where its last round stopped; a reaper starts
// rdb.KeysOutliveSale back, since older releases' keys have expired.
//
// And it prunes the rooms' indexes (rdb.RoomsKey): each round drops, of up
// to pruneBatch of each partition's fields from where its last round
// stopped (HSCAN), those of vouchers Redis no longer holds
// (prunerooms.lua), so the index the gateways read holds what the live
// vouchers hold, not every voucher a shop ever sold.

import (
	"context"
	"sync"
	"time"

	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/settle"
)

// forgotten is where the trimmer's forgetting of releases stopped: the
// last release it forgot, in the order MySQL recorded them.
type forgotten struct {
	mu sync.Mutex
	at time.Time
	id int64
}

// TrimmerResult is what a round of the trimmer did.
type TrimmerResult struct {
	// ReleasesForgotten are the released orders' ids dropped from Redis,
	// MySQL having recorded them done.
	ReleasesForgotten int `log:"releases_forgotten"`
	// Trimmed are the vouchers whose users' indexes were trimmed after the
	// sale.
	Trimmed int `log:"trimmed"`
	// RoomsPruned are the fields of the rooms' indexes dropped, their
	// vouchers gone from Redis.
	RoomsPruned int `log:"rooms_pruned"`
}

// forgetReleases drops from Redis the ids of releases MySQL recorded done
// more than settle.ForgetAfter ago, reading up to the round's bound of
// them (FLASHSALE_REAPER_MAX_PER_ROUND).
func (r *Reaper) forgetReleases(ctx context.Context, res *TrimmerResult) error {
	f := &r.forgotten
	f.mu.Lock()
	defer f.mu.Unlock()
	cutoff := r.now().UTC().Add(-settle.ForgetAfter)
	if f.at.IsZero() {
		f.at = cutoff.Add(-rdb.KeysOutliveSale)
	}
	for read := 0; read < r.cfg.MaxPerRound; {
		rels, err := r.db.ReleasesDone(ctx, f.at, f.id, cutoff, r.cfg.BatchSize)
		if err != nil || len(rels) == 0 {
			return err
		}
		orders := make([]order.Order, len(rels))
		for i, rel := range rels {
			orders[i] = rel.Order()
		}
		n, err := r.redis.ForgetReleases(ctx, orders, cutoff)
		if err != nil {
			return err
		}
		res.ReleasesForgotten += n // of their ids, those still in Redis
		read += len(rels)
		last := rels[len(rels)-1]
		f.at, f.id = *last.RedisReleasedAt, last.OrderID
	}
	return nil
}

// trim is the trimmer's round: released orders forgotten, the users'
// indexes of ended sales, then the rooms' indexes pruned.
func (r *Reaper) trim(ctx context.Context, res *TrimmerResult) error {
	if err := r.forgetReleases(ctx, res); err != nil {
		return err
	}
	if err := r.trimIndexes(ctx, res); err != nil {
		return err
	}
	return r.pruneRooms(ctx, res)
}

// pruneBatch is about how many fields of a partition's rooms' index a
// round looks at: one script call of as many EXISTS (~0.1 ms of Redis).
const pruneBatch = 500

// pruned is where the pruning of each partition's rooms' index stopped
// (its HSCAN cursor).
type pruned struct {
	mu      sync.Mutex
	cursors map[int]uint64
}

// pruneRooms drops from the rooms' indexes a batch of each partition's
// fields of vouchers Redis no longer holds.
func (r *Reaper) pruneRooms(ctx context.Context, res *TrimmerResult) error {
	pr := &r.pruned
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.cursors == nil {
		pr.cursors = map[int]uint64{}
	}
	for _, p := range r.redis.AllPartitions() {
		next, n, err := r.redis.PruneRoomIndex(ctx, p, pr.cursors[p], pruneBatch)
		if err != nil {
			return err
		}
		pr.cursors[p] = next
		res.RoomsPruned += n
	}
	return nil
}

// trimIndexes trims the users' indexes of the vouchers whose sale has
// ended and whose keys Redis still holds.
func (r *Reaper) trimIndexes(ctx context.Context, res *TrimmerResult) error {
	now := r.now()
	vs, err := r.db.ActiveVouchers(ctx, now.UTC(), rdb.KeysOutliveSale)
	if err != nil {
		return err
	}
	for _, v := range vs {
		if v.EndsAt == nil || v.EndsAt.After(now) {
			continue
		}
		done, err := r.indexes.Trim(ctx, v.ID, now)
		if err != nil {
			return err
		}
		if done {
			res.Trimmed++
		}
	}
	return nil
}
