package db

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/flashsale/flashsale/pkg/draw"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/sale"
)

// Failure reasons recorded in orders.reason.
const (
	ReasonOutOfStock      = "out_of_stock"
	ReasonVoucherNotFound = "voucher_not_found"
	ReasonDeadLetter      = "dead_letter"
	ReasonUserLimit       = "user_limit"
	// ReasonExpired is the release reason of a cancelled order.
	ReasonExpired = "payment_expired"
	// ReasonDrawClosed means an entry that reached MySQL after its draw began.
	ReasonDrawClosed = "draw_closed"
)

// readCommitted is the isolation of the pipeline's write transactions: they
// read rows by primary key and lock what they change, and need no gap locks
// (which would make a worker's insert wait on a reaper's cancellation).
var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// Outcome is what persisting one order came to.
type Outcome struct {
	Order  order.Order
	Status order.Status // created, completed (no payment), entered (a draw), failed, or the status a re-delivered order already had
	Reason string
	// Redelivered: the order was persisted before; nothing was written now.
	Redelivered bool
	// Conflict: a different order already holds this id (it was not written).
	Conflict bool
	// Release is set when the order is failed: MySQL has recorded the
	// failure and owes its unit to Redis (see pkg/settle).
	Release *Release
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
	out, err := s.persist(ctx, orders, false)
	if err == nil || !isDuplicateKey(err) {
		return out, err
	}
	return s.persist(ctx, orders, true)
}

// persist is PersistBatch in one transaction. Without lookup it assumes no
// order is in MySQL yet (if one is, the insert fails on its primary key and
// nothing is written); with lookup it first finds the orders persisted
// before and writes only the others.
func (s *Store) persist(ctx context.Context, orders []order.Order, lookup bool) ([]Outcome, error) {
	out := make([]Outcome, len(orders))
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		fresh := make([]order.Order, 0, len(orders))
		where := make([]int, 0, len(orders)) // fresh[k] is orders[where[k]]
		var byID map[int64]Order
		if lookup {
			var err error
			if byID, err = persistedOrders(tx, orders); err != nil {
				return err
			}
		}
		seen := make(map[int64]bool, len(orders))
		for i, o := range orders {
			out[i] = Outcome{Order: o}
			if e, ok := byID[o.ID]; ok {
				out[i].Redelivered = true
				out[i].Status, out[i].Reason = order.Status(e.Status), e.Reason
				out[i].Conflict = e.VoucherID != o.VoucherID || e.UserID != o.UserID
				continue
			}
			if seen[o.ID] { // the same entry twice in one batch
				out[i].Redelivered = true
				continue
			}
			seen[o.ID] = true
			fresh = append(fresh, o)
			where = append(where, i)
		}
		rows, err := s.insertAndAllot(tx, fresh)
		if err != nil {
			return err
		}
		if err := insertEvents(tx, rows, ""); err != nil {
			return err
		}
		for k, r := range rows {
			out[where[k]].Status, out[where[k]].Reason = order.Status(r.Status), r.Reason
		}
		for i := range out {
			if out[i].Status == order.StatusFailed && !out[i].Conflict {
				rel := releaseOf(out[i].Order, out[i].Reason)
				out[i].Release = &rel
			}
		}
		return nil
	}, readCommitted)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// persistedOrders returns the orders of the batch already in MySQL, by id.
func persistedOrders(tx *gorm.DB, orders []order.Order) (map[int64]Order, error) {
	ids := make([]int64, len(orders))
	for i, o := range orders {
		ids[i] = o.ID
	}
	var existing []Order
	if err := tx.Select("id", "voucher_id", "user_id", "status", "reason").Where("id IN ?", ids).Find(&existing).Error; err != nil {
		return nil, fmt.Errorf("find persisted: %w", err)
	}
	byID := make(map[int64]Order, len(existing))
	for _, e := range existing {
		byID[e.ID] = e
	}
	return byID, nil
}

// insertAndAllot inserts new orders as created, all in one statement, and
// only then takes each voucher's row lock (so two workers' inserts overlap)
// to decide which keep their unit; the others become failed, with their
// release rows. It returns the rows as they end, aligned with orders.
func (s *Store) insertAndAllot(tx *gorm.DB, orders []order.Order) ([]Order, error) {
	if len(orders) == 0 {
		return nil, nil
	}
	perVoucher, vouchers := groupByVoucher(orders)
	rows := make([]Order, len(orders))
	metas := map[int64]voucherMeta{}
	found := map[int64]bool{}
	for _, v := range vouchers {
		meta, ok, err := s.voucherMeta(tx, v)
		if err != nil {
			return nil, err
		}
		metas[v], found[v] = meta, ok
		for _, i := range perVoucher[v] {
			o := orders[i]
			rows[i] = rowOf(o, meta.paymentTimeout)
			if meta.draw {
				rows[i].Status, rows[i].ExpiresAt = string(order.StatusEntered), o.CreatedAt
			}
			if meta.traits.NoPayment {
				rows[i].Status, rows[i].ExpiresAt = string(order.StatusCompleted), o.CreatedAt
			}
			if !ok {
				rows[i].Status, rows[i].Reason, rows[i].ExpiresAt = string(order.StatusFailed), ReasonVoucherNotFound, o.CreatedAt
			}
		}
	}
	if err := insertOrders(tx, rows); err != nil {
		return nil, err
	}
	var failed []Order
	for _, v := range vouchers {
		if !found[v] {
			failed = append(failed, pick(rows, perVoucher[v])...) // voucher gone: nothing to lock
			continue
		}
		allot := allotVoucher
		if metas[v].draw {
			allot = allotEntries
		}
		refused, err := allot(tx, v, metas[v], rows, perVoucher[v])
		if err != nil {
			return nil, err
		}
		failed = append(failed, refused...)
	}
	return rows, markFailed(tx, failed)
}

// rowOf is the row of new order o, created, with payment window timeout.
func rowOf(o order.Order, timeout time.Duration) Order {
	return Order{ID: o.ID, VoucherID: o.VoucherID, UserID: o.UserID, Day: o.Day, Quantity: o.Units(),
		Item: o.Item.No, Amount: o.Item.Amount, Code: o.Item.Code, Status: string(order.StatusCreated),
		CreatedAt: o.CreatedAt, ExpiresAt: o.CreatedAt.Add(timeout), UpdatedAt: o.CreatedAt, ClaimSerial: o.Claim}
}

// allotVoucher takes voucher v's row lock and decides which of its just
// inserted orders idx keep their units: the per-user limit counts the units
// of every live order (this batch's included, so a user's orders beyond it
// fail, last first), no more units than the stock left are taken, an order
// all or nothing, and an order of a pooled voucher keeps its item only if
// no other order holds it (each item is one row of items, given to its
// order by a conditional update). It takes the units of those that stay
// and returns the ones that must fail, with status and reason set.
func allotVoucher(tx *gorm.DB, v int64, meta voucherMeta, rows []Order, idx []int) ([]Order, error) {
	var stock int64
	if err := tx.Raw("SELECT stock FROM vouchers WHERE id = ? FOR UPDATE", v).Scan(&stock).Error; err != nil {
		return nil, fmt.Errorf("lock voucher %d: %w", v, err)
	}
	users := make([]string, len(idx))
	inBatch := map[string]int64{}
	for j, i := range idx {
		users[j] = rows[i].UserID
		inBatch[rows[i].UserID] += rows[i].Quantity
	}
	held, err := liveCounts(tx, v, users)
	if err != nil {
		return nil, err
	}
	holders, err := itemHolders(tx, v, rows, idx)
	if err != nil {
		return nil, err
	}
	var withItem []*Order
	// What each user held before this batch, plus what it keeps of it.
	for u, n := range inBatch {
		held[u] -= n
	}
	var refused []Order
	var taken int64
	for _, i := range idx {
		r := &rows[i]
		switch {
		case r.Item > 0 && holders[r.Item] != 0:
			r.Status, r.Reason = string(order.StatusFailed), ReasonItemTaken
		case held[r.UserID]+r.Quantity > meta.perUserLimit:
			r.Status, r.Reason = string(order.StatusFailed), ReasonUserLimit
		case taken+r.Quantity > stock:
			r.Status, r.Reason = string(order.StatusFailed), ReasonOutOfStock
		default:
			held[r.UserID] += r.Quantity
			taken += r.Quantity
			if r.Item > 0 {
				holders[r.Item] = r.ID // a second order with the same item fails
				withItem = append(withItem, r)
			}
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
	return refused, assignItems(tx, v, withItem)
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
		o := order.Order{ID: r.ID, VoucherID: r.VoucherID, UserID: r.UserID, Day: r.Day, Quantity: r.Quantity, CreatedAt: r.CreatedAt, Item: r.ItemOf(),
			Claim: r.ClaimSerial}
		owed[i] = releaseOf(o, r.Reason)
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

// insertOrders inserts rows in one statement.
func insertOrders(tx *gorm.DB, rows []Order) error {
	err := insertRows(tx, "orders", []string{"id", "voucher_id", "user_id", "day", "quantity", "item", "amount", "code", "status",
		"reason", "created_at", "expires_at", "updated_at", "claim_serial"}, len(rows), func(args []any, i int) []any {
		r := &rows[i]
		return append(args, r.ID, r.VoucherID, r.UserID, r.Day, r.Quantity, r.Item, r.Amount, r.Code, r.Status, r.Reason,
			r.CreatedAt, r.ExpiresAt, r.UpdatedAt, r.ClaimSerial)
	})
	if err != nil {
		return fmt.Errorf("insert %d orders: %w", len(rows), err)
	}
	return nil
}

// insertRows inserts n rows into table's columns in one statement built
// by hand (gorm's reflection cost more than the statement's round trip):
// values appends row i's values, one per column, to args.
func insertRows(tx *gorm.DB, table string, columns []string, n int, values func(args []any, i int) []any) error {
	if n == 0 {
		return nil
	}
	row := "(" + strings.Repeat("?,", len(columns)-1) + "?)"
	var b strings.Builder
	b.Grow(32 + len(table) + 16*len(columns) + (len(row)+1)*n)
	b.WriteString("INSERT INTO ")
	b.WriteString(table)
	b.WriteString(" (")
	b.WriteString(strings.Join(columns, ", "))
	b.WriteString(") VALUES ")
	args := make([]any, 0, len(columns)*n)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(row)
		args = values(args, i)
	}
	return tx.Exec(b.String(), args...).Error
}

func isDuplicateKey(err error) bool { return ErrorNumber(err) == ErrNumDupEntry }

// liveCounts returns how many units of voucher v each of users holds in
// live orders.
func liveCounts(tx *gorm.DB, v int64, users []string) (map[string]int64, error) {
	var rows []struct {
		UserID string
		N      int64
	}
	err := tx.Raw(`SELECT user_id, SUM(quantity) AS n FROM orders WHERE voucher_id = ? AND user_id IN ? AND status IN ?
		GROUP BY user_id`, v, users, order.Live).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("count orders per user of voucher %d: %w", v, err)
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.UserID] = r.N
	}
	return out, nil
}

// voucherMeta is what never changes of a voucher, cached per Store.
type voucherMeta struct {
	paymentTimeout time.Duration
	perUserLimit   int64
	traits         sale.Traits
	draw           bool // a draw sale: its orders are entries
}

func (s *Store) voucherMeta(tx *gorm.DB, v int64) (voucherMeta, bool, error) {
	if m, ok := s.meta.Load(v); ok {
		return m.(voucherMeta), true, nil
	}
	var row struct {
		PaymentTimeoutSeconds int64
		PerUserLimit          int64
		Kind                  string
		Allocation            string
	}
	q := tx.Raw("SELECT payment_timeout_seconds, per_user_limit, kind, allocation FROM vouchers WHERE id = ?", v).Scan(&row)
	if q.Error != nil {
		return voucherMeta{}, false, fmt.Errorf("read voucher %d: %w", v, q.Error)
	}
	if q.RowsAffected == 0 {
		return voucherMeta{}, false, nil
	}
	m := voucherMeta{paymentTimeout: time.Duration(row.PaymentTimeoutSeconds) * time.Second, perUserLimit: row.PerUserLimit,
		traits: sale.TraitsOf(row.Kind), draw: row.Allocation == draw.Draw}
	s.meta.Store(v, m)
	return m, true, nil
}
