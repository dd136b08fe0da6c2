package db

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/sale"
)

// Store reads and writes vouchers and orders.
type Store struct {
	db *gorm.DB
	// meta caches what never changes of a voucher.
	meta sync.Map // int64 -> voucherMeta
	// rows keeps the last sequenced rows of events read, decoded.
	rows rowCache
}

// New returns a Store over db.
func New(db *gorm.DB) *Store { return &Store{db: db} }

// DB is the underlying handle, for tests and readiness checks.
func (s *Store) DB() *gorm.DB { return s.db }

// Close closes the store's connections.
func (s *Store) Close() error { return closeGorm(s.db) }

// CreateVoucher inserts v, the items of its pool if it has one, and the
// change that puts it in Redis (creates; pkg/settle applies it) with its
// action by by (the change's Actions), in one transaction, and sets v.ID.
// A voucher created under v.CreationKey before is not created again: v
// becomes it, and the error is ErrCreatedBefore.
func (s *Store) CreateVoucher(ctx context.Context, v *Voucher, items []order.Item, by Actor, now time.Time) (VoucherChange, error) {
	v.Kind = cmp.Or(v.Kind, sale.Default)
	var ch VoucherChange
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(v).Error; err != nil {
			if v.CreationKey != nil && isDuplicateKey(err) {
				return s.createdUnder(tx, v)
			}
			return err
		}
		if err := insertItems(tx, v.ID, items); err != nil {
			return err
		}
		ch = VoucherChange{VoucherID: v.ID, Creates: true, CreatedAt: now, PaymentTimeoutSeconds: v.PaymentTimeoutSeconds,
			Actions: []Action{creation(*v, by, now)}}
		if err := recordActions(tx, ch.Actions); err != nil {
			return err
		}
		return tx.Create(&ch).Error
	})
	if errors.Is(err, ErrCreatedBefore) {
		return ch, err
	}
	if err != nil {
		return ch, fmt.Errorf("create voucher: %w", err)
	}
	return ch, nil
}

// ErrCreatedBefore says that a voucher was created under the creation's key
// already; CreateVoucher has set the voucher to it.
var ErrCreatedBefore = errors.New("a voucher was created under this key already")

// createdUnder reads into v the voucher created under v's CreationKey
// and returns ErrCreatedBefore, or the reading's error.
func (s *Store) createdUnder(tx *gorm.DB, v *Voucher) error {
	key := *v.CreationKey
	var got Voucher
	if err := tx.Where("creation_key = ?", key).Take(&got).Error; err != nil {
		return err
	}
	*v = got
	return ErrCreatedBefore
}

// VoucherSnapshot reads voucher id, the items of its pool nobody holds and
// the ids of its changes, in one consistent read: what Redis must hold to
// put the voucher on sale (pkg/settle), every change but those recorded
// since already in it.
func (s *Store) VoucherSnapshot(ctx context.Context, id int64) (v Voucher, items []order.Item, changes []int64, err error) {
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Where("id = ?", id).Limit(1).Find(&v)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return ErrNotFound
		}
		if items, err = unheldItems(tx, id); err != nil {
			return err
		}
		return tx.Model(&VoucherChange{}).Where("voucher_id = ?", id).Order("id").Pluck("id", &changes).Error
	}, consistentRead)
	return v, items, changes, err
}

// Snapshot runs fn with a Store whose reads all see MySQL as of one moment
// (a read-only REPEATABLE READ transaction: InnoDB's consistent snapshot,
// taken at its first read).
func (s *Store) Snapshot(ctx context.Context, fn func(*Store) error) error {
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		return fn(&Store{db: tx})
	}, consistentRead)
}

var consistentRead = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}

// Voucher reads voucher id.
func (s *Store) Voucher(ctx context.Context, id int64) (Voucher, error) {
	return take[Voucher](ctx, s.db, id)
}

// take reads the row with primary key id; a missing row is ErrNotFound.
func take[T any](ctx context.Context, db *gorm.DB, id int64) (T, error) {
	var row T
	err := db.WithContext(ctx).Take(&row, id).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return row, ErrNotFound
	}
	return row, err
}

// OrderCounts counts voucher v's orders by status.
func (s *Store) OrderCounts(ctx context.Context, v int64) (map[order.Status]int64, error) {
	var rows []struct {
		Status string
		N      int64
	}
	err := s.db.WithContext(ctx).Model(&Order{}).Select("status, COUNT(*) AS n").
		Where("voucher_id = ?", v).Group("status").Scan(&rows).Error
	out := map[order.Status]int64{order.StatusCreated: 0, order.StatusPaid: 0, order.StatusCompleted: 0, order.StatusCancelled: 0, order.StatusFailed: 0}
	for _, r := range rows {
		out[order.Status(r.Status)] = r.N
	}
	return out, err
}

// Order reads order id.
func (s *Store) Order(ctx context.Context, id int64) (Order, error) {
	return take[Order](ctx, s.db, id)
}

// PayOrder marks user's created order id paid at now, if now is before its
// payment deadline. Paying a paid order again returns it unchanged.
// Another user's order is ErrNotFound; a late payment is ErrPaymentExpired.
func (s *Store) PayOrder(ctx context.Context, id int64, user string, now time.Time) (Order, error) {
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Model(&Order{}).
			Where("id = ? AND user_id = ? AND status = ? AND expires_at > ?", id, user, order.StatusCreated, now).
			Updates(map[string]any{"status": order.StatusPaid, "paid_at": now, "updated_at": now})
		if res.Error != nil {
			return fmt.Errorf("pay order %d: %w", id, res.Error)
		}
		if res.RowsAffected == 0 {
			return nil
		}
		return recordEvents(tx, []int64{id}, "")
	}, readCommitted)
	if err != nil {
		return Order{}, err
	}
	o, err := s.Order(ctx, id)
	if err != nil {
		return o, err
	}
	switch {
	case o.UserID != user:
		return Order{}, ErrNotFound
	case o.Status == string(order.StatusPaid):
		return o, nil
	case o.Status == string(order.StatusCreated), o.Status == string(order.StatusCancelled):
		return o, ErrPaymentExpired
	default:
		return o, ErrNotPayable
	}
}
