package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
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

// PersistBatch writes orders in one transaction and returns what each came
// to, aligned with orders: created (a unit taken from vouchers.stock),
// failed (MySQL has no unit left, the user holds the limit, or the voucher
// is gone; with its release row, see OwedReleases), or, for an order
// persisted before (re-delivery), what it already was, with nothing written.
//
// The common case, a batch of new orders, inserts them all first and only
// then takes the voucher's row lock, so two workers' inserts overlap and the
// lock is held for the stock and per-user checks alone. A batch holding an
// order persisted before fails that insert on its primary key and is done
// again the careful way, which looks every order up first.
func (s *Store) PersistBatch(ctx context.Context, orders []order.Order) ([]Outcome, error) {
	out, err := s.persistNew(ctx, orders)
	if err == nil || !isDuplicateKey(err) {
		return out, err
	}
	return s.persistCareful(ctx, orders)
}

// persistNew is PersistBatch for a batch of orders none of which is in
// MySQL yet; if one is, it fails with a duplicate-key error and writes nothing.
func (s *Store) persistNew(ctx context.Context, orders []order.Order) ([]Outcome, error) {
	out := make([]Outcome, len(orders))
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		perVoucher, vouchers := groupByVoucher(orders)
		rows := make([]Order, len(orders))
		for _, v := range vouchers {
			meta, found, err := s.voucherMeta(tx, v)
			if err != nil {
				return err
			}
			for _, i := range perVoucher[v] {
				o := orders[i]
				rows[i] = Order{ID: o.ID, VoucherID: o.VoucherID, UserID: o.UserID, Day: o.Day, Status: string(order.StatusCreated),
					CreatedAt: o.CreatedAt, ExpiresAt: o.CreatedAt.Add(meta.paymentTimeout), UpdatedAt: o.CreatedAt}
				if !found {
					rows[i].Status, rows[i].Reason, rows[i].ExpiresAt = string(order.StatusFailed), ReasonVoucherNotFound, o.CreatedAt
				}
			}
		}
		if err := insertOrders(tx, rows); err != nil {
			return err
		}
		var failed []Order
		for _, v := range vouchers {
			idx := perVoucher[v]
			if rows[idx[0]].Status == string(order.StatusFailed) {
				failed = append(failed, pick(rows, idx)...) // voucher gone: nothing to lock
				continue
			}
			refused, err := s.settleVoucher(tx, v, rows, idx)
			if err != nil {
				return err
			}
			failed = append(failed, refused...)
		}
		if err := markFailed(tx, failed); err != nil {
			return err
		}
		for i, r := range rows {
			out[i] = Outcome{Order: orders[i], Status: order.Status(r.Status), Reason: r.Reason}
		}
		return nil
	}, readCommitted)
	return out, err
}

// settleVoucher takes voucher v's row lock and decides which of its just
// inserted orders idx keep their unit: the per-user limit counts every live
// order (this batch's included, so a user's orders beyond it fail, last
// first), and no more orders than the stock left are created. It takes the
// units of those that stay created and returns the ones that must fail,
// with status and reason set.
func (s *Store) settleVoucher(tx *gorm.DB, v int64, rows []Order, idx []int) ([]Order, error) {
	meta, _, err := s.voucherMeta(tx, v)
	if err != nil {
		return nil, err
	}
	var stock int64
	if err := tx.Raw("SELECT stock FROM vouchers WHERE id = ? FOR UPDATE", v).Scan(&stock).Error; err != nil {
		return nil, fmt.Errorf("lock voucher %d: %w", v, err)
	}
	users := make([]string, len(idx))
	inBatch := map[string]int64{}
	for j, i := range idx {
		users[j] = rows[i].UserID
		inBatch[rows[i].UserID]++
	}
	held, err := liveCounts(tx, v, users)
	if err != nil {
		return nil, err
	}
	// What each user held before this batch, plus what it keeps of it.
	for u, n := range inBatch {
		held[u] -= n
	}
	var refused []Order
	var taken int64
	for _, i := range idx {
		r := &rows[i]
		switch {
		case held[r.UserID] >= meta.perUserLimit:
			r.Status, r.Reason = string(order.StatusFailed), ReasonUserLimit
		case taken >= stock:
			r.Status, r.Reason = string(order.StatusFailed), ReasonOutOfStock
		default:
			held[r.UserID]++
			taken++
			continue
		}
		r.ExpiresAt = r.CreatedAt
		refused = append(refused, *r)
	}
	if taken > 0 {
		if err := tx.Exec("UPDATE vouchers SET stock = stock - ? WHERE id = ?", taken, v).Error; err != nil {
			return nil, fmt.Errorf("take %d of voucher %d: %w", taken, v, err)
		}
	}
	return refused, nil
}

// markFailed turns just inserted orders into failed ones, with reason, and
// records their releases.
func markFailed(tx *gorm.DB, failed []Order) error {
	if len(failed) == 0 {
		return nil
	}
	byReason := map[string][]int64{}
	owed := make([]Release, len(failed))
	for i, r := range failed {
		byReason[r.Reason] = append(byReason[r.Reason], r.ID)
		owed[i] = Release{OrderID: r.ID, VoucherID: r.VoucherID, UserID: r.UserID, Day: r.Day, Reason: r.Reason, CreatedAt: r.CreatedAt}
	}
	for reason, ids := range byReason {
		if err := tx.Exec("UPDATE orders SET status = ?, reason = ?, expires_at = created_at WHERE id IN ?", order.StatusFailed, reason, ids).Error; err != nil {
			return fmt.Errorf("mark %d orders failed: %w", len(ids), err)
		}
	}
	return insertReleases(tx, owed)
}

func pick(rows []Order, idx []int) []Order {
	out := make([]Order, len(idx))
	for j, i := range idx {
		out[j] = rows[i]
	}
	return out
}

// groupByVoucher returns the indexes of orders per voucher and the vouchers
// in ascending id, the order in which every transaction locks them (so two
// transactions never wait on each other in a cycle).
func groupByVoucher(orders []order.Order) (map[int64][]int, []int64) {
	per := map[int64][]int{}
	var vouchers []int64
	for i, o := range orders {
		if _, ok := per[o.VoucherID]; !ok {
			vouchers = append(vouchers, o.VoucherID)
		}
		per[o.VoucherID] = append(per[o.VoucherID], i)
	}
	slices.Sort(vouchers)
	return per, vouchers
}

// insertOrders inserts rows in one statement, built by hand: gorm's
// reflection cost more than the statement's round trip.
func insertOrders(tx *gorm.DB, rows []Order) error {
	if len(rows) == 0 {
		return nil
	}
	var b strings.Builder
	b.Grow(120 + 22*len(rows))
	b.WriteString("INSERT INTO orders (id, voucher_id, user_id, day, status, reason, created_at, expires_at, updated_at) VALUES ")
	args := make([]any, 0, 9*len(rows))
	for i, r := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,?,?,?,?,?,?)")
		args = append(args, r.ID, r.VoucherID, r.UserID, r.Day, r.Status, r.Reason, r.CreatedAt, r.ExpiresAt, r.UpdatedAt)
	}
	if err := tx.Exec(b.String(), args...).Error; err != nil {
		return fmt.Errorf("insert %d orders: %w", len(rows), err)
	}
	return nil
}

func isDuplicateKey(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1062
}

// persistCareful is PersistBatch for a batch that may hold orders persisted
// before: it looks them all up first and writes only the new ones.
func (s *Store) persistCareful(ctx context.Context, orders []order.Order) ([]Outcome, error) {
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
		if err := insertOrders(tx, rows); err != nil {
			return err
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
