package db

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/flashsale/flashsale/pkg/order"
)

// Release is a row of releases: a unit that went back to MySQL's stock and
// is owed to (or was given back to) Redis.
type Release struct {
	OrderID         int64 `gorm:"primaryKey;autoIncrement:false"`
	VoucherID       int64
	UserID          string
	Day             string
	Quantity        int64 // units given back
	Item            int64 // the item given back to the pool (0: none)
	Amount          int64
	Code            string
	Reason          string
	CreatedAt       time.Time
	RedisReleasedAt *time.Time
}

// Order is the order this release is for, as the Redis release needs it.
func (r Release) Order() order.Order {
	return order.Order{ID: r.OrderID, VoucherID: r.VoucherID, UserID: r.UserID, Day: r.Day, Quantity: r.Quantity,
		Item: order.Item{No: r.Item, Amount: r.Amount, Code: r.Code}}
}

// releaseOf is the release row owed for failed order o. An order that
// failed because another holds its item gives the item back to nobody.
func releaseOf(o order.Order, reason string) Release {
	rel := Release{OrderID: o.ID, VoucherID: o.VoucherID, UserID: o.UserID, Day: o.Day, Quantity: o.Units(), Reason: reason, CreatedAt: o.CreatedAt}
	if reason != ReasonItemTaken {
		rel.Item, rel.Amount, rel.Code = o.Item.No, o.Item.Amount, o.Item.Code
	}
	return rel
}

func insertReleases(tx *gorm.DB, rs []Release) error {
	if len(rs) == 0 {
		return nil
	}
	// A release row is written once per order: a second one (a retried
	// transaction that did commit) changes nothing.
	if err := tx.Clauses(clause.Insert{Modifier: "IGNORE"}).Create(&rs).Error; err != nil {
		return fmt.Errorf("record %d releases: %w", len(rs), err)
	}
	return nil
}

// CancelExpired cancels up to limit created orders whose payment deadline
// is at or before now, returns their units to vouchers.stock and records the
// releases owed to Redis, all in one transaction; a draw sale's units go to
// its waitlist instead (passOn), and owe Redis nothing. It returns every
// cancellation. Rows another transaction
// holds are skipped (SKIP LOCKED), so several reapers share the work and a
// payment in progress is never overtaken.
func (s *Store) CancelExpired(ctx context.Context, now time.Time, limit int) ([]Release, error) {
	var out []Release
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var due []Order
		if err := tx.Raw(`SELECT id, voucher_id, user_id, day, quantity, item, amount, code, draw_rank FROM orders
			WHERE status = ? AND expires_at <= ? ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED`,
			order.StatusCreated, now, limit).Scan(&due).Error; err != nil {
			return fmt.Errorf("find expired orders: %w", err)
		}
		if len(due) == 0 {
			return nil
		}
		ids := make([]int64, len(due))
		for i, o := range due {
			ids[i] = o.ID
		}
		res := tx.Exec("UPDATE orders SET status = ?, reason = ?, updated_at = ? WHERE id IN ? AND status = ?",
			order.StatusCancelled, ReasonExpired, now, ids, order.StatusCreated)
		if res.Error != nil {
			return fmt.Errorf("cancel %d orders: %w", len(ids), res.Error)
		}
		if res.RowsAffected != int64(len(ids)) {
			return fmt.Errorf("cancel: %d of %d locked orders changed", res.RowsAffected, len(ids))
		}
		if err := recordEvents(tx, ids, ReasonExpired); err != nil {
			return err
		}
		perVoucher, vouchers := map[int64][]Order{}, []int64{}
		for _, o := range due {
			if perVoucher[o.VoucherID] == nil {
				vouchers = append(vouchers, o.VoucherID)
			}
			perVoucher[o.VoucherID] = append(perVoucher[o.VoucherID], o)
		}
		slices.Sort(vouchers) // the order every transaction locks vouchers in
		out = make([]Release, len(due))
		for i, o := range due {
			out[i] = Release{OrderID: o.ID, VoucherID: o.VoucherID, UserID: o.UserID, Day: o.Day, Quantity: o.Quantity,
				Item: o.Item, Amount: o.Amount, Code: o.Code, Reason: ReasonExpired, CreatedAt: now}
		}
		drawn := map[int64]bool{}
		for _, v := range vouchers {
			os := perVoucher[v]
			meta, _, err := s.voucherMeta(tx, v)
			if err != nil {
				return err
			}
			if meta.draw { // a draw's unit goes down its waitlist
				drawn[v] = true
				if err := passOn(tx, v, os, now); err != nil {
					return err
				}
				continue
			}
			var units int64
			freed := make([]int64, len(os))
			for i, o := range os {
				units += o.Quantity
				freed[i] = o.ID
			}
			if err := tx.Exec("UPDATE vouchers SET stock = stock + ? WHERE id = ?", units, v).Error; err != nil {
				return fmt.Errorf("return %d units to voucher %d: %w", units, v, err)
			}
			if err := freeItems(tx, freed); err != nil {
				return err
			}
		}
		// Redis is owed the units of every sale but a draw's.
		owed := slices.DeleteFunc(slices.Clone(out), func(r Release) bool { return drawn[r.VoucherID] })
		return insertReleases(tx, owed)
	}, readCommitted)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// OwedReleases returns up to limit releases Redis has not been given yet,
// oldest first.
func (s *Store) OwedReleases(ctx context.Context, limit int) ([]Release, error) {
	var out []Release
	err := s.db.WithContext(ctx).Where("redis_released_at IS NULL").Order("order_id").Limit(limit).Find(&out).Error
	return out, err
}

// ReleasesDone returns up to limit releases Redis was given and MySQL
// recorded so before before, after the one (at, orderID) in the order of
// (redis_released_at, order_id): a keyset over releases_owed's index.
func (s *Store) ReleasesDone(ctx context.Context, at time.Time, orderID int64, before time.Time, limit int) ([]Release, error) {
	var out []Release
	err := s.db.WithContext(ctx).
		Where("redis_released_at >= ? AND redis_released_at < ? AND (redis_released_at > ? OR order_id > ?)", at, before, at, orderID).
		Order("redis_released_at, order_id").Limit(limit).Find(&out).Error
	return out, err
}

// MarkReleased records that Redis got these orders' units back.
func (s *Store) MarkReleased(ctx context.Context, orderIDs []int64, now time.Time) error {
	if len(orderIDs) == 0 {
		return nil
	}
	return s.db.WithContext(ctx).Model(&Release{}).Where("order_id IN ? AND redis_released_at IS NULL", orderIDs).
		Update("redis_released_at", now).Error
}

// RecordFailed records o as failed with reason unless it is persisted
// already, and owes its release to Redis. It returns the order's status
// afterwards: failed, with the release MySQL now owes Redis, or the status
// it already had (created, paid, ...), in which case nothing was written
// and there is no release.
func (s *Store) RecordFailed(ctx context.Context, o order.Order, reason string) (order.Status, *Release, error) {
	var status order.Status
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		row := rowOf(o, 0)
		row.Status, row.Reason, row.ExpiresAt = string(order.StatusFailed), reason, o.CreatedAt
		res := tx.Clauses(clause.Insert{Modifier: "IGNORE"}).Create(&row)
		if res.Error != nil {
			return fmt.Errorf("record failed order %d: %w", o.ID, res.Error)
		}
		if res.RowsAffected == 0 {
			existing, err := take[Order](ctx, tx, o.ID)
			if err != nil {
				return err
			}
			status = order.Status(existing.Status)
			if status != order.StatusFailed {
				return nil
			}
		} else if err := recordEvents(tx, []int64{o.ID}, ""); err != nil {
			return err
		}
		status = order.StatusFailed
		return insertReleases(tx, []Release{releaseOf(o, reason)})
	}, readCommitted)
	switch {
	case errors.Is(err, ErrNotFound):
		return "", nil, fmt.Errorf("record failed order %d: insert ignored but no row", o.ID)
	case err != nil:
		return "", nil, err
	case status != order.StatusFailed:
		return status, nil, nil
	}
	rel := releaseOf(o, reason)
	return status, &rel, nil
}

// Writable checks that MySQL accepts a write now, by upserting this
// process's row of store_probes in a transaction of its own. A worker asks
// it before deciding that a batch, rather than the store, is at fault.
func (s *Store) Writable(ctx context.Context, who string) error {
	return s.db.WithContext(ctx).Exec(`INSERT INTO store_probes (who, at) VALUES (?, UTC_TIMESTAMP(3))
		ON DUPLICATE KEY UPDATE at = VALUES(at)`, who).Error
}

// ActiveVouchers returns the vouchers whose sale and payment window have
// not ended, or ended less than since ago (while Redis keeps their keys).
func (s *Store) ActiveVouchers(ctx context.Context, now time.Time, since time.Duration) ([]Voucher, error) {
	var out []Voucher
	err := s.db.WithContext(ctx).Where("ends_at IS NULL OR ends_at + INTERVAL payment_timeout_seconds SECOND > ?", now.Add(-since)).
		Order("id").Find(&out).Error
	return out, err
}

// BucketedVouchers returns the ids of the vouchers on sale (or ended less
// than since ago) whose stock is spread over more than one Redis bucket.
func (s *Store) BucketedVouchers(ctx context.Context, now time.Time, since time.Duration) ([]int64, error) {
	var out []int64
	err := s.db.WithContext(ctx).Model(&Voucher{}).Where("stock_buckets > 1").
		Where("ends_at IS NULL OR ends_at + INTERVAL payment_timeout_seconds SECOND > ?", now.Add(-since)).
		Order("id").Pluck("id", &out).Error
	return out, err
}

// SellingVoucher is a voucher on sale, as the reaper's detector reads it.
type SellingVoucher struct {
	ID           int64
	StockBuckets int
	HotSince     *time.Time
}

// SellingVouchers returns the vouchers whose sale has started and not
// ended at now, that have stock left in MySQL or are marked hot.
func (s *Store) SellingVouchers(ctx context.Context, now time.Time) ([]SellingVoucher, error) {
	var out []SellingVoucher
	err := s.db.WithContext(ctx).Model(&Voucher{}).Select("id", "stock_buckets", "hot_since").
		Where("(starts_at IS NULL OR starts_at <= ?) AND (ends_at IS NULL OR ends_at > ?)", now, now).
		Where("stock > 0 OR hot_since IS NOT NULL").
		Order("id").Scan(&out).Error
	return out, err
}

// SetHot records voucher v hot since since, or not hot (since nil); it
// keeps the time it became hot while it stays so.
func (s *Store) SetHot(ctx context.Context, v int64, since *time.Time) error {
	q := s.db.WithContext(ctx).Model(&Voucher{}).Where("id = ?", v)
	if since != nil {
		q = q.Where("hot_since IS NULL")
	}
	return q.Update("hot_since", since).Error
}

// LiveOrder is a live order, as counting needs it.
type LiveOrder struct {
	UserID    string
	Day       string
	Quantity  int64
	CreatedAt time.Time
}

// LiveOrders returns voucher v's live orders (created, paid, completed).
func (s *Store) LiveOrders(ctx context.Context, v int64) ([]LiveOrder, error) {
	return s.countedOrders(ctx, "voucher_id = ? AND status IN ?", v, order.Live)
}

// Entrants returns draw voucher v's entries that did not fail, as counting
// them per user needs it (admit.lua counts entries in u:USER).
func (s *Store) Entrants(ctx context.Context, v int64) ([]LiveOrder, error) {
	return s.countedOrders(ctx, "voucher_id = ? AND status <> ?", v, order.StatusFailed)
}

// countedOrders reads the orders where selects, as counting needs them.
func (s *Store) countedOrders(ctx context.Context, where string, args ...any) ([]LiveOrder, error) {
	var out []LiveOrder
	err := s.db.WithContext(ctx).Model(&Order{}).Select("user_id", "day", "quantity", "created_at").
		Where(where, args...).Scan(&out).Error
	return out, err
}

// OwedReleaseIDs returns the orders of voucher v whose unit went back to
// stock in MySQL and which Redis has not been told of yet.
func (s *Store) OwedReleaseIDs(ctx context.Context, v int64) ([]int64, error) {
	var out []int64
	err := s.db.WithContext(ctx).Model(&Release{}).Where("voucher_id = ? AND redis_released_at IS NULL", v).
		Order("order_id").Pluck("order_id", &out).Error
	return out, err
}

// ExistingOrders returns which of ids are in orders.
func (s *Store) ExistingOrders(ctx context.Context, ids []int64) (map[int64]bool, error) {
	out := make(map[int64]bool, len(ids))
	for i := 0; i < len(ids); i += 1000 {
		var found []int64
		if err := s.db.WithContext(ctx).Model(&Order{}).Where("id IN ?", ids[i:min(i+1000, len(ids))]).Pluck("id", &found).Error; err != nil {
			return nil, err
		}
		for _, id := range found {
			out[id] = true
		}
	}
	return out, nil
}
