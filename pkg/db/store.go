package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/flashsale/flashsale/pkg/order"
)

// Store reads and writes vouchers and orders.
type Store struct {
	db *gorm.DB
	// meta caches what never changes of a voucher.
	meta sync.Map // int64 -> voucherMeta
}

// New returns a Store over db.
func New(db *gorm.DB) *Store { return &Store{db: db} }

// DB is the underlying handle, for tests and readiness checks.
func (s *Store) DB() *gorm.DB { return s.db }

// CreateVoucher inserts v and sets v.ID.
func (s *Store) CreateVoucher(ctx context.Context, v *Voucher) error {
	if err := s.db.WithContext(ctx).Create(v).Error; err != nil {
		return fmt.Errorf("create voucher: %w", err)
	}
	return nil
}

// DeleteVoucher removes a voucher that was never put on sale.
func (s *Store) DeleteVoucher(ctx context.Context, id int64) error {
	return s.db.WithContext(ctx).Delete(&Voucher{}, id).Error
}

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
	out := map[order.Status]int64{order.StatusCreated: 0, order.StatusPaid: 0, order.StatusCancelled: 0, order.StatusFailed: 0}
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
	res := s.db.WithContext(ctx).Model(&Order{}).
		Where("id = ? AND user_id = ? AND status = ? AND expires_at > ?", id, user, order.StatusCreated, now).
		Updates(map[string]any{"status": order.StatusPaid, "paid_at": now, "updated_at": now})
	if res.Error != nil {
		return Order{}, fmt.Errorf("pay order %d: %w", id, res.Error)
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

// Failure reasons recorded in orders.reason.
const (
	ReasonOutOfStock      = "out_of_stock"
	ReasonVoucherNotFound = "voucher_not_found"
	ReasonDeadLetter      = "dead_letter"
	ReasonUserLimit       = "user_limit"
	// ReasonExpired is the release reason of a cancelled order.
	ReasonExpired = "payment_expired"
)

// readCommitted is the isolation of the pipeline's write transactions: they
// read rows by primary key and lock what they change, and need no gap locks
// (which would make a worker's insert wait on a reaper's cancellation).
var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// Outcome is what persisting one order came to.
type Outcome struct {
	Order  order.Order
	Status order.Status // created, failed, or the status a re-delivered order already had
	Reason string
	// Redelivered: the order was persisted before; nothing was written now.
	Redelivered bool
	// Conflict: a different order already holds this id (it was not written).
	Conflict bool
}

// PersistBatch writes orders in one transaction: it skips orders already
// persisted (re-delivery), takes stock for the new ones with one conditional
// update per voucher, records as failed those MySQL has no stock for, and
// inserts all new rows in one statement. A failed order gets its release
// row in the same transaction (see OwedReleases). Outcomes align with orders.
func (s *Store) PersistBatch(ctx context.Context, orders []order.Order) ([]Outcome, error) {
	out := make([]Outcome, len(orders))
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		for i, o := range orders {
			out[i] = Outcome{Order: o}
		}
		ids := make([]int64, len(orders))
		for i, o := range orders {
			ids[i] = o.ID
		}
		var existing []Order
		if err := tx.Select("id", "voucher_id", "user_id", "status", "reason").Where("id IN ?", ids).Find(&existing).Error; err != nil {
			return fmt.Errorf("find persisted: %w", err)
		}
		byID := make(map[int64]Order, len(existing))
		for _, e := range existing {
			byID[e.ID] = e
		}

		// New orders per voucher, vouchers in ascending id so that two
		// workers lock voucher rows in the same order (no deadlock).
		perVoucher := map[int64][]int{}
		var vouchers []int64
		seen := map[int64]bool{}
		for i, o := range orders {
			if e, ok := byID[o.ID]; ok {
				out[i].Redelivered = true
				out[i].Status, out[i].Reason = order.Status(e.Status), e.Reason
				out[i].Conflict = e.VoucherID != o.VoucherID || e.UserID != o.UserID
				continue
			}
			if seen[o.ID] {
				out[i].Redelivered = true
				continue
			}
			seen[o.ID] = true
			if _, ok := perVoucher[o.VoucherID]; !ok {
				vouchers = append(vouchers, o.VoucherID)
			}
			perVoucher[o.VoucherID] = append(perVoucher[o.VoucherID], i)
		}
		slices.Sort(vouchers)

		rows := make([]Order, 0, len(orders))
		for _, v := range vouchers {
			idx := perVoucher[v]
			status, err := s.decide(tx, v, orders, idx)
			if err != nil {
				return err
			}
			for j, i := range idx {
				o := orders[i]
				row := Order{ID: o.ID, VoucherID: o.VoucherID, UserID: o.UserID, Day: o.Day, CreatedAt: o.CreatedAt,
					ExpiresAt: status[j].expiresAt, UpdatedAt: o.CreatedAt, Status: string(status[j].status), Reason: status[j].reason}
				out[i].Status, out[i].Reason = status[j].status, row.Reason
				rows = append(rows, row)
			}
		}
		if len(rows) > 0 {
			if err := tx.Create(&rows).Error; err != nil {
				return fmt.Errorf("insert %d orders: %w", len(rows), err)
			}
		}
		var owed []Release
		for _, r := range rows {
			if r.Status == string(order.StatusFailed) {
				owed = append(owed, Release{OrderID: r.ID, VoucherID: r.VoucherID, UserID: r.UserID, Day: r.Day, Reason: r.Reason, CreatedAt: r.CreatedAt})
			}
		}
		return insertReleases(tx, owed)
	}, readCommitted)
	if err != nil {
		return nil, err
	}
	return out, nil
}

type voucherMeta struct {
	paymentTimeout time.Duration
	perUserLimit   int64
}

type decision struct {
	status    order.Status
	reason    string
	expiresAt time.Time
}

// decide settles the new orders idx of voucher v inside the batch's
// transaction: it takes stock for them and checks the per-user limit again
// (Redis checked it at admission; this holds even if Redis lost its counts),
// all under the voucher's row lock, which the stock update takes.
func (s *Store) decide(tx *gorm.DB, v int64, orders []order.Order, idx []int) ([]decision, error) {
	out := make([]decision, len(idx))
	meta, found, err := s.voucherMeta(tx, v)
	if err != nil {
		return nil, err
	}
	if !found {
		for j, i := range idx {
			out[j] = decision{order.StatusFailed, ReasonVoucherNotFound, orders[i].CreatedAt}
		}
		return out, nil
	}
	taken, err := takeStock(tx, v, int64(len(idx)))
	if err != nil {
		return nil, err
	}
	users := make([]string, 0, len(idx))
	for _, i := range idx {
		users = append(users, orders[i].UserID)
	}
	held, err := liveCounts(tx, v, users)
	if err != nil {
		return nil, err
	}
	var assigned int64
	for j, i := range idx {
		o := orders[i]
		switch {
		case held[o.UserID] >= meta.perUserLimit:
			out[j] = decision{order.StatusFailed, ReasonUserLimit, o.CreatedAt}
		case assigned < taken:
			out[j] = decision{order.StatusCreated, "", o.CreatedAt.Add(meta.paymentTimeout)}
			held[o.UserID]++
			assigned++
		default:
			out[j] = decision{order.StatusFailed, ReasonOutOfStock, o.CreatedAt}
		}
	}
	if assigned < taken {
		if err := tx.Exec("UPDATE vouchers SET stock = stock + ? WHERE id = ?", taken-assigned, v).Error; err != nil {
			return nil, fmt.Errorf("return %d units to voucher %d: %w", taken-assigned, v, err)
		}
	}
	return out, nil
}

// takeStock takes up to n units of voucher v and returns how many it took.
// The common case is one conditional UPDATE; only when MySQL has fewer than
// n units left does it lock the row and take what remains.
func takeStock(tx *gorm.DB, v, n int64) (int64, error) {
	res := tx.Exec("UPDATE vouchers SET stock = stock - ? WHERE id = ? AND stock >= ?", n, v, n)
	if res.Error != nil {
		return 0, fmt.Errorf("take %d of voucher %d: %w", n, v, res.Error)
	}
	if res.RowsAffected == 1 {
		return n, nil
	}
	var stock int64
	if err := tx.Raw("SELECT stock FROM vouchers WHERE id = ? FOR UPDATE", v).Scan(&stock).Error; err != nil {
		return 0, fmt.Errorf("lock voucher %d: %w", v, err)
	}
	taken := min(stock, n)
	if taken > 0 {
		if err := tx.Exec("UPDATE vouchers SET stock = stock - ? WHERE id = ?", taken, v).Error; err != nil {
			return 0, fmt.Errorf("take %d of voucher %d: %w", taken, v, err)
		}
	}
	return taken, nil
}

// liveCounts returns how many created or paid orders of voucher v each of
// users holds.
func liveCounts(tx *gorm.DB, v int64, users []string) (map[string]int64, error) {
	var rows []struct {
		UserID string
		N      int64
	}
	err := tx.Raw(`SELECT user_id, COUNT(*) AS n FROM orders WHERE voucher_id = ? AND user_id IN ? AND status IN ?
		GROUP BY user_id`, v, users, []order.Status{order.StatusCreated, order.StatusPaid}).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("count orders per user of voucher %d: %w", v, err)
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.UserID] = r.N
	}
	return out, nil
}

func (s *Store) voucherMeta(tx *gorm.DB, v int64) (voucherMeta, bool, error) {
	if m, ok := s.meta.Load(v); ok {
		return m.(voucherMeta), true, nil
	}
	var row struct {
		PaymentTimeoutSeconds int64
		PerUserLimit          int64
	}
	q := tx.Raw("SELECT payment_timeout_seconds, per_user_limit FROM vouchers WHERE id = ?", v).Scan(&row)
	if q.Error != nil {
		return voucherMeta{}, false, fmt.Errorf("read voucher %d: %w", v, q.Error)
	}
	if q.RowsAffected == 0 {
		return voucherMeta{}, false, nil
	}
	m := voucherMeta{paymentTimeout: time.Duration(row.PaymentTimeoutSeconds) * time.Second, perUserLimit: row.PerUserLimit}
	s.meta.Store(v, m)
	return m, true, nil
}
