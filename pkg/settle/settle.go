package settle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// RedisVoucher is MySQL's voucher v as Redis admits it, with stock units
// left to admit: the one conversion between the stores' vouchers (the
// creation, reconcile's rebuild, tests). A pool's Items are the caller's
// to fill.
func RedisVoucher(v db.Voucher, stock int64) rdb.Voucher {
	a := rdb.Voucher{ID: v.ID, Name: v.Name, Stock: stock, PerUserLimit: v.PerUserLimit, PerUserDailyLimit: v.PerUserDailyLimit,
		Pooled: v.Traits().Pooled, Paused: v.Paused, Buckets: max(v.StockBuckets, 1), Draw: v.IsDraw(),
		ProofOfWork: v.PowMaxNumber, Room: v.WaitingRoom, Access: v.Access}
	if v.StartsAt != nil {
		a.StartsAt = *v.StartsAt
	}
	if v.EndsAt != nil {
		a.EndsAt = *v.EndsAt
	}
	a.ExpireAt = rdb.KeysExpireAt(a.EndsAt, time.Duration(v.PaymentTimeoutSeconds)*time.Second)
	return a
}

// change is MySQL's change c as change.lua applies it: the keys' new
// expiry follows a new end.
func change(c db.VoucherChange) rdb.Change {
	out := rdb.Change{ID: c.ID, VoucherID: c.VoucherID, AddStock: c.AddStock, Paused: c.Paused, Pow: c.Pow, Room: c.Room, Access: c.Access}
	if c.EndsAt != nil {
		out.EndsAt = *c.EndsAt
		out.ExpireAt = rdb.KeysExpireAt(*c.EndsAt, time.Duration(c.PaymentTimeoutSeconds)*time.Second)
	}
	return out
}

// ForgetAfter is how long after MySQL recorded a release done its id is
// kept in Redis's set of released orders (the reaper's trimmer then drops
// it): far longer than a caller holds a release it knew owed (a reaper's
// round is bounded by FLASHSALE_REAPER_ROUND_TIMEOUT, a gateway's request
// and a worker's batch by seconds) plus the clocks' skew. A caller that
// holds one longer is refused, not obeyed twice (rdb.ErrStaleRelease).
// The sweeper forgets the ids of moves between a voucher's buckets made
// longer ago than this, for the same reason (rdb.Store.ForgetMoves).
const ForgetAfter = 10 * time.Minute

// Releases gives Redis back the units of rels and records that in MySQL.
// knew is when the caller knew them owed: a time read before it read
// their rows, or made them. A release Redis refuses as known too long ago
// (rdb.ErrStaleRelease: it may have been done and forgotten since) is left
// as MySQL has it: still owed, the releaser reads it again; so is one of
// a buyer whose records a split under way is moving (rdb.ErrSplitting). It returns how
// many Redis had not had back before.
func Releases(ctx context.Context, r *rdb.Store, d *db.Store, rels []db.Release, knew, now time.Time) (int, error) {
	if len(rels) == 0 {
		return 0, nil
	}
	ids := make([]int64, 0, len(rels))
	given := 0
	for _, rel := range rels {
		ok, err := r.Release(ctx, rel.Order(), knew)
		if errors.Is(err, rdb.ErrStaleRelease) || errors.Is(err, rdb.ErrSplitting) {
			continue // still owed: read again
		}
		if err != nil {
			return given, fmt.Errorf("release order %d in redis: %w", rel.OrderID, err)
		}
		if ok {
			given++
		}
		ids = append(ids, rel.OrderID)
	}
	if err := d.MarkReleased(ctx, ids, now.UTC()); err != nil {
		return given, fmt.Errorf("mark %d releases done: %w", len(ids), err)
	}
	return given, nil
}

// ErrCreationOwed refuses, for now, a change of a voucher Redis does not hold yet because
// its creation has not reached Redis; it stays owed and is applied once
// the creation is (the reaper's Owed does both, in order).
var ErrCreationOwed = errors.New("the voucher's creation has not reached Redis yet")

// Later reports whether err, from Changes, leaves changes owed to be
// applied later, and nothing wrong: the voucher's creation has not
// reached Redis (ErrCreationOwed), or it must wait for a split under way
// (rdb.ErrSplitting), after which the reaper applies them to every bucket.
func Later(err error) bool {
	return errors.Is(err, ErrCreationOwed) || errors.Is(err, rdb.ErrSplitting)
}

// Changes applies voucher changes (creations, pauses and resumes, top-ups,
// new ends) to Redis, in order, and marks them applied in MySQL. It
// returns how many Redis had not had before. A change of a voucher whose
// creation is still owed, or that must wait for its split, is left owed (Later,
// after the others are marked); one of a voucher Redis lost after its creation is marked
// (reconcile rebuilds the voucher from MySQL, every change included).
func Changes(ctx context.Context, r *rdb.Store, d *db.Store, changes []db.VoucherChange, now time.Time) (int, error) {
	ids := make([]int64, 0, len(changes))
	applied := 0
	var waiting error
	for _, c := range changes {
		ok, err := apply(ctx, r, d, c)
		if Later(err) {
			waiting = fmt.Errorf("change %d of voucher %d: %w", c.ID, c.VoucherID, err)
			continue
		}
		if err != nil {
			return applied, err
		}
		if ok {
			applied++
		}
		ids = append(ids, c.ID)
	}
	if err := d.MarkChangesApplied(ctx, ids, now.UTC()); err != nil {
		return applied, fmt.Errorf("mark %d changes applied: %w", len(ids), err)
	}
	return applied, waiting
}

// apply applies one change to Redis.
func apply(ctx context.Context, r *rdb.Store, d *db.Store, c db.VoucherChange) (bool, error) {
	if c.Creates {
		return create(ctx, r, d, c.VoucherID)
	}
	ok, found, err := r.ApplyChange(ctx, change(c))
	if err != nil || found {
		return ok, err
	}
	owed, err := d.CreationOwed(ctx, c.VoucherID)
	if err != nil {
		return false, err
	}
	if owed {
		return false, ErrCreationOwed
	}
	return false, nil
}

// create puts voucher v in Redis as MySQL has it now (stock, pool, pause,
// end: every change recorded so far, which Redis then counts as applied),
// unless Redis holds it already. A voucher no longer in MySQL has nothing
// to put.
func create(ctx context.Context, r *rdb.Store, d *db.Store, v int64) (bool, error) {
	vo, items, changes, err := d.VoucherSnapshot(ctx, v)
	if errors.Is(err, db.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read voucher %d to create it in redis: %w", v, err)
	}
	a := RedisVoucher(vo, vo.Stock)
	a.Items = items
	return r.CreateVoucher(ctx, a, changes)
}

// Rebuild rewrites a voucher's Redis state with want (reconcile's repair:
// what MySQL and the streams say Redis should hold) and records in Redis
// released (the releases MySQL still owes it) and changes (every change of
// the voucher), read with want, as done, so none is applied again (want
// counts them; a release recorded done is never asked again but by a
// caller that knew it owed before, which the bucket's cutoff refuses once
// it is forgotten). Run it while no claims are admitted (reaper reconcile
// --repair).
func Rebuild(ctx context.Context, r *rdb.Store, want rdb.VoucherState, released, changes []int64) error {
	return r.RewriteVoucher(ctx, want, released, changes)
}

// Restore is Rebuild for a voucher Redis lost whole, while claims run: it
// writes only the buckets Redis still lacks (rdb.Store.RestoreVoucher),
// and reports whether it wrote bucket 0. A bucket a gateway created since
// want was read may be admitting claims want does not count: it is left
// alone.
func Restore(ctx context.Context, r *rdb.Store, want rdb.VoucherState, released, changes []int64) (bool, error) {
	return r.RestoreVoucher(ctx, want, released, changes)
}

// Owed applies the changes and releases MySQL still owes Redis, batch at
// a time, oldest first, until none is left or limit were settled (limit
// <= 0: no limit). It returns how many rows it settled. A change that
// waits for its voucher's creation is passed over, not an error: the
// creation comes first in the order and is applied in the same pass.
func Owed(ctx context.Context, r *rdb.Store, d *db.Store, batch, limit int, now func() time.Time) (int, error) {
	settled := 0
	var after int64
	for limit <= 0 || settled < limit {
		owed, err := d.OwedChanges(ctx, after, batch)
		if err != nil {
			return settled, err
		}
		if len(owed) == 0 {
			break
		}
		if _, err := Changes(ctx, r, d, owed, now()); err != nil && !Later(err) {
			return settled, err
		}
		settled += len(owed)
		after = owed[len(owed)-1].ID
	}
	for limit <= 0 || settled < limit {
		knew := now() // before the rows are read
		owed, err := d.OwedReleases(ctx, batch)
		if err != nil || len(owed) == 0 {
			return settled, err
		}
		if _, err := Releases(ctx, r, d, owed, knew, now()); err != nil {
			return settled, err
		}
		settled += len(owed)
		if len(owed) < batch {
			break
		}
	}
	return settled, nil
}
