// Package settle is the one place where a unit goes back to Redis.
//
// A unit is given back only for an order MySQL has recorded as failed or
// cancelled: that transaction also wrote the order's row of releases, and
// only pkg/db hands out a db.Release, built from such a row (an Outcome of
// a failed order, RecordFailed, CancelExpired, OwedReleases). Giving it
// back is two steps, in this order: release.lua (which ignores an order it
// released before, so a retry is harmless), then marking the row done in
// MySQL. A crash between them leaves the row owed, and the reaper settles
// it again; nothing is given back twice and nothing is given back that
// MySQL did not record. The worker, the reaper and reconcile all call here.
//
// An operator's change of a voucher (more stock, a new end) reaches Redis
// the same way: recorded in voucher_changes with the change itself, then
// change.lua (once per change id), then marked applied.
package settle

import (
	"context"
	"fmt"
	"time"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// Releases gives Redis back the units of rels and records that in MySQL.
// It returns how many Redis had not had back before.
func Releases(ctx context.Context, r *rdb.Store, d *db.Store, rels []db.Release, now time.Time) (int, error) {
	if len(rels) == 0 {
		return 0, nil
	}
	ids := make([]int64, 0, len(rels))
	given := 0
	for _, rel := range rels {
		ok, err := r.Release(ctx, rel.Order())
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

// Changes applies operators' changes of vouchers to Redis and records
// that in MySQL. It returns how many Redis had not had before.
func Changes(ctx context.Context, r *rdb.Store, d *db.Store, changes []db.VoucherChange, now time.Time) (int, error) {
	ids := make([]int64, 0, len(changes))
	applied := 0
	for _, c := range changes {
		ok, err := r.ApplyChange(ctx, c.Change())
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
	return applied, nil
}

// Owed settles the changes and releases MySQL still owes Redis, batch at a
// time, until none is left or limit were settled (limit <= 0: no limit).
// It returns how many rows it settled.
func Owed(ctx context.Context, r *rdb.Store, d *db.Store, batch, limit int, now func() time.Time) (int, error) {
	settled := 0
	for limit <= 0 || settled < limit {
		owed, err := d.OwedChanges(ctx, batch)
		if err != nil {
			return settled, err
		}
		if len(owed) == 0 {
			break
		}
		if _, err := Changes(ctx, r, d, owed, now()); err != nil {
			return settled, err
		}
		settled += len(owed)
	}
	for limit <= 0 || settled < limit {
		owed, err := d.OwedReleases(ctx, batch)
		if err != nil || len(owed) == 0 {
			return settled, err
		}
		if _, err := Releases(ctx, r, d, owed, now()); err != nil {
			return settled, err
		}
		settled += len(owed)
		if len(owed) < batch {
			break
		}
	}
	return settled, nil
}
