package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/flashsale/flashsale/pkg/order"
)

// Errors of the operations on a running sale.
var (
	// ErrNotCancellable means the order is paid, completed or failed.
	ErrNotCancellable = errors.New("order cannot be cancelled")
)

// ReasonCancelled is the release reason of an order its owner cancelled.
const ReasonCancelled = "cancelled_by_user"

// SetPaused pauses or resumes voucher id, in one transaction that also
// records the change owed to Redis, and returns the voucher and the
// change (pkg/settle applies it).
func (s *Store) SetPaused(ctx context.Context, id int64, paused bool, by Actor, now time.Time) (Voucher, VoucherChange, error) {
	return s.change(ctx, id, by, VoucherChange{VoucherID: id, Paused: &paused, CreatedAt: now}, func(_ *gorm.DB, v *Voucher, updates map[string]any) error {
		updates["paused"] = paused
		v.Paused = paused
		return nil
	})
}

// change locks voucher id, lets edit say what to update (and change v to
// match), updates it and records ch and what by did (ch.Actions), in one
// transaction; ErrNotFound if there is no such voucher.
func (s *Store) change(ctx context.Context, id int64, by Actor, ch VoucherChange, edit func(tx *gorm.DB, v *Voucher, updates map[string]any) error) (Voucher, VoucherChange, error) {
	var v Voucher
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		if v, err = lockVoucher(tx, id); err != nil {
			return err
		}
		ch.PaymentTimeoutSeconds = v.PaymentTimeoutSeconds
		updates := map[string]any{}
		was := v
		if err := edit(tx, &v, updates); err != nil {
			return err
		}
		if err := tx.Model(&Voucher{}).Where("id = ?", id).Updates(updates).Error; err != nil {
			return fmt.Errorf("change voucher %d: %w", id, err)
		}
		ch.Actions = actionsOf(was, v, by, ch.CreatedAt)
		if err := recordActions(tx, ch.Actions); err != nil {
			return err
		}
		return tx.Create(&ch).Error
	}, readCommitted)
	return v, ch, err
}

// lockVoucher reads voucher id in tx, its row locked until tx ends;
// ErrNotFound when there is none.
func lockVoucher(tx *gorm.DB, id int64) (Voucher, error) {
	var v Voucher
	res := tx.Clauses(clause.Locking{Strength: "UPDATE"}).Where("id = ?", id).Limit(1).Find(&v)
	if res.Error != nil {
		return v, fmt.Errorf("lock voucher %d: %w", id, res.Error)
	}
	if res.RowsAffected == 0 {
		return v, ErrNotFound
	}
	return v, nil
}

// Vouchers returns up to limit vouchers with ids above after, by id.
func (s *Store) Vouchers(ctx context.Context, after int64, limit int) ([]Voucher, error) {
	var out []Voucher
	err := s.db.WithContext(ctx).Where("id > ?", after).Order("id").Limit(limit).Find(&out).Error
	return out, err
}

// ClaimOrder is user's order of voucher v made by the claim of serial
// serial at created (an order made before serials, serial 0, by its
// time alone); false when there is none.
func (s *Store) ClaimOrder(ctx context.Context, v int64, user string, created time.Time, serial uint64) (Order, bool, error) {
	var out []Order
	err := s.db.WithContext(ctx).Where("voucher_id = ? AND user_id = ? AND created_at = ? AND claim_serial = ?", v, user, created, serial).
		Order("id").Limit(1).Find(&out).Error
	if err != nil || len(out) == 0 {
		return Order{}, false, err
	}
	return out[0], true, nil
}

// UserOrders returns user's orders of voucher v, newest first, at most limit.
func (s *Store) UserOrders(ctx context.Context, v int64, user string, limit int) ([]Order, error) {
	var out []Order
	err := s.db.WithContext(ctx).Where("voucher_id = ? AND user_id = ?", v, user).Order("id DESC").Limit(limit).Find(&out).Error
	return out, err
}

// CancelOrder cancels user's created order id at now: its units go back to
// the voucher's stock and its item to the pool, and its release is owed to
// Redis, all in one transaction; the caller settles the release (pkg/settle).
// Cancelling a cancelled order again returns it with no release. Another
// user's order is ErrNotFound; a paid, completed or failed one
// ErrNotCancellable.
func (s *Store) CancelOrder(ctx context.Context, id int64, user string, now time.Time) (Order, *Release, error) {
	var o Order
	var rel *Release
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Clauses(clause.Locking{Strength: "UPDATE"}).Where("id = ?", id).Limit(1).Find(&o)
		if res.Error != nil {
			return fmt.Errorf("lock order %d: %w", id, res.Error)
		}
		if res.RowsAffected == 0 || o.UserID != user {
			return ErrNotFound
		}
		switch order.Status(o.Status) {
		case order.StatusCancelled:
			return nil
		case order.StatusCreated:
		default:
			return ErrNotCancellable
		}
		if err := tx.Exec("UPDATE orders SET status = ?, reason = ?, updated_at = ? WHERE id = ?",
			order.StatusCancelled, ReasonCancelled, now, id).Error; err != nil {
			return fmt.Errorf("cancel order %d: %w", id, err)
		}
		o.Status, o.Reason, o.UpdatedAt = string(order.StatusCancelled), ReasonCancelled, now
		if err := recordEvents(tx, []int64{id}, ""); err != nil {
			return err
		}
		meta, _, err := s.voucherMeta(tx, o.VoucherID)
		if err != nil {
			return err
		}
		if meta.draw { // a draw's unit goes down its waitlist
			return passOn(tx, o.VoucherID, []Order{o}, now)
		}
		if err := tx.Exec("UPDATE vouchers SET stock = stock + ? WHERE id = ?", o.Quantity, o.VoucherID).Error; err != nil {
			return fmt.Errorf("return %d units to voucher %d: %w", o.Quantity, o.VoucherID, err)
		}
		if err := freeItems(tx, []int64{id}); err != nil {
			return err
		}
		r := Release{OrderID: o.ID, VoucherID: o.VoucherID, UserID: o.UserID, Day: o.Day, Quantity: o.Quantity,
			Item: o.Item, Amount: o.Amount, Code: o.Code, Reason: ReasonCancelled, CreatedAt: now}
		rel = &r
		return insertReleases(tx, []Release{r})
	}, readCommitted)
	if err != nil {
		return Order{}, nil, err
	}
	return o, rel, nil
}

// Payment is what a payment provider's confirmation came to.
type Payment struct {
	Order Order
	// RefundDue: the money arrived for an order that no longer holds its
	// unit (cancelled, failed), or that was paid already with another
	// payment, or needs none: it is recorded in late_payments for a refund,
	// and the order is unchanged.
	RefundDue bool
}

// RecordPayment records the provider's payment paymentID of order id at
// now, idempotently: a created order becomes paid (even past its deadline,
// as long as the reaper has not cancelled it: its unit is still held); the
// same payment again changes nothing; any other payment is recorded for a
// refund, never sold twice. A missing order is ErrNotFound.
func (s *Store) RecordPayment(ctx context.Context, id int64, paymentID string, now time.Time) (Payment, error) {
	var p Payment
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Clauses(clause.Locking{Strength: "UPDATE"}).Where("id = ?", id).Limit(1).Find(&p.Order)
		if res.Error != nil {
			return fmt.Errorf("lock order %d: %w", id, res.Error)
		}
		if res.RowsAffected == 0 {
			return ErrNotFound
		}
		o := &p.Order
		switch {
		case o.Status == string(order.StatusCreated):
			if err := tx.Exec("UPDATE orders SET status = ?, paid_at = ?, payment_id = ?, updated_at = ? WHERE id = ?",
				order.StatusPaid, now, paymentID, now, id).Error; err != nil {
				return fmt.Errorf("pay order %d: %w", id, err)
			}
			o.Status, o.PaidAt, o.PaymentID, o.UpdatedAt = string(order.StatusPaid), &now, &paymentID, now
			return recordEvents(tx, []int64{id}, "")
		case o.Status == string(order.StatusPaid) && o.PaymentID != nil && *o.PaymentID == paymentID:
			return nil // the same confirmation again
		}
		p.RefundDue = true
		if err := tx.Exec("INSERT IGNORE INTO late_payments (payment_id, order_id, received_at) VALUES (?, ?, ?)",
			paymentID, id, now).Error; err != nil {
			return fmt.Errorf("record late payment of order %d: %w", id, err)
		}
		return nil
	}, readCommitted)
	return p, err
}

// ErrNotToppable says that stock can be added only to a kind that allows it
// (sale.Traits.ToppedUp: a pool's items are fixed when it is created).
var ErrNotToppable = errors.New("stock can be added only to a voucher of units")

// VoucherChange is a row of voucher_changes: an operator's change of a
// voucher, owed to (or applied to) Redis.
type VoucherChange struct {
	ID        int64 `gorm:"primaryKey"`
	VoucherID int64
	// Creates: this change puts the voucher in Redis (its creation).
	Creates  bool
	AddStock int64
	EndsAt   *time.Time
	// Paused: a pause (true) or a resume (false); nil: neither.
	Paused *bool
	// Pow: the proof-of-work gate's new difficulty (0: off); nil: unchanged.
	Pow *int64
	// Room: the waiting room's new settings (room.Config.Encode), "0"
	// off; nil: unchanged.
	Room *string
	// Access: the access codes' new Voucher.Access; nil: unchanged.
	Access         *int64
	CreatedAt      time.Time
	RedisAppliedAt *time.Time
	// PaymentTimeoutSeconds is the voucher's, read with the change (the
	// keys' new expiry follows the new end and the payment window).
	PaymentTimeoutSeconds int64 `gorm:"->"`
	// Actions: what the change did, as recorded in voucher_actions (not
	// a column).
	Actions []Action `gorm:"-"`
}

// Edit is an operator's change of a voucher: units to add (0: none), a new
// end (nil: unchanged), a new proof-of-work difficulty (nil: unchanged; 0
// turns the gate off), a new room, new access codes.
type Edit struct {
	AddStock int64
	EndsAt   *time.Time
	Pow      *int64
	// Room: the waiting room's new settings (room.Config.Encode; "0"
	// turns it off); nil: unchanged.
	Room *string
	// Access: the access codes' new Voucher.Access (0 turns them off);
	// nil: unchanged.
	Access *int64
	// SplitTo, when above 0, asks the voucher's split into that many
	// buckets in the same transaction (AskSplit's, with the change).
	SplitTo int
	// By is who makes the change (voucher_actions records it).
	By Actor
	// Check, when set, decides on the voucher as the change leaves it, its
	// row locked, before anything is written: its error refuses the whole
	// change. One decision under the voucher's lock, so two changes that
	// are each fine alone cannot both pass (a room and a split).
	Check func(Voucher) error
}

// ChangeVoucher applies e to voucher id in one transaction that also
// records the change owed to Redis. It returns the voucher as changed and
// the change.
func (s *Store) ChangeVoucher(ctx context.Context, id int64, e Edit, now time.Time) (Voucher, VoucherChange, error) {
	addStock, endsAt := e.AddStock, e.EndsAt
	ch := VoucherChange{VoucherID: id, AddStock: addStock, EndsAt: endsAt, Pow: e.Pow, Room: e.Room, Access: e.Access, CreatedAt: now}
	return s.change(ctx, id, e.By, ch, func(_ *gorm.DB, v *Voucher, updates map[string]any) error {
		if addStock > 0 && !v.Traits().ToppedUp {
			return ErrNotToppable
		}
		if addStock > 0 {
			updates["stock"] = gorm.Expr("stock + ?", addStock)
			updates["stock_total"] = gorm.Expr("stock_total + ?", addStock)
			v.Stock += addStock
			v.StockTotal += addStock
		}
		if endsAt != nil {
			updates["ends_at"] = *endsAt
			v.EndsAt = endsAt
		}
		if e.Pow != nil {
			updates["pow_max_number"] = *e.Pow
			v.PowMaxNumber = *e.Pow
		}
		if e.Room != nil {
			v.WaitingRoom = *e.Room
			if v.WaitingRoom == "0" {
				v.WaitingRoom = ""
			}
			updates["waiting_room"] = v.WaitingRoom
		}
		if e.Access != nil {
			updates["access"] = *e.Access
			v.Access = *e.Access
		}
		if e.Check != nil {
			if err := e.Check(*v); err != nil {
				return err
			}
		}
		if e.SplitTo > 0 {
			updates["split_to"] = e.SplitTo
			v.SplitTo = e.SplitTo
		}
		return nil
	})
}

// OwedChanges returns up to limit changes Redis has not been given yet
// with ids above after, oldest first, each with its voucher's payment
// window (0 when the voucher is gone: Redis then has nothing to change).
func (s *Store) OwedChanges(ctx context.Context, after int64, limit int) ([]VoucherChange, error) {
	var out []VoucherChange
	err := s.db.WithContext(ctx).Raw(`SELECT c.*, COALESCE(v.payment_timeout_seconds, 0) AS payment_timeout_seconds
		FROM voucher_changes c LEFT JOIN vouchers v ON v.id = c.voucher_id
		WHERE c.redis_applied_at IS NULL AND c.id > ? ORDER BY c.id LIMIT ?`, after, limit).Scan(&out).Error
	return out, err
}

// CreationOwed reports whether voucher v's creation has not reached Redis
// yet (a voucher created before creations were recorded has none owed).
func (s *Store) CreationOwed(ctx context.Context, v int64) (bool, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&VoucherChange{}).
		Where("voucher_id = ? AND creates = 1 AND redis_applied_at IS NULL", v).Count(&n).Error
	return n > 0, err
}

// MarkChangesApplied records that Redis has these changes.
func (s *Store) MarkChangesApplied(ctx context.Context, ids []int64, now time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	return s.db.WithContext(ctx).Model(&VoucherChange{}).Where("id IN ? AND redis_applied_at IS NULL", ids).
		Update("redis_applied_at", now).Error
}

// ChangeIDs returns the ids of voucher v's changes.
func (s *Store) ChangeIDs(ctx context.Context, v int64) ([]int64, error) {
	var out []int64
	err := s.db.WithContext(ctx).Model(&VoucherChange{}).Where("voucher_id = ?", v).Order("id").Pluck("id", &out).Error
	return out, err
}
