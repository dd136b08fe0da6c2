package db

import (
	"context"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/flashsale/flashsale/pkg/order"
)

// ReasonItemTaken fails an order whose item another order already holds
// (Redis handed it out twice, having lost its state): the item stays with
// its holder and is not given back to the pool.
const ReasonItemTaken = "item_taken"

// insertItems writes a new pooled voucher's items, unowned.
func insertItems(tx *gorm.DB, v int64, items []order.Item) error {
	for i := 0; i < len(items); i += 1000 {
		chunk := items[i:min(i+1000, len(items))]
		err := insertRows(tx, "items", []string{"voucher_id", "item", "amount", "code"}, len(chunk), func(args []any, j int) []any {
			return append(args, v, chunk[j].No, chunk[j].Amount, chunk[j].Code)
		})
		if err != nil {
			return fmt.Errorf("insert %d items of voucher %d: %w", len(chunk), v, err)
		}
	}
	return nil
}

// itemHolders locks the items the orders rows[idx] took of voucher v and
// returns who holds each: an order id, 0 when unowned, -1 when the item
// is not in MySQL at all (or refunded: it can no longer be taken).
func itemHolders(tx *gorm.DB, v int64, rows []Order, idx []int) (map[int64]int64, error) {
	var nos []int64
	for _, i := range idx {
		if rows[i].Item > 0 {
			nos = append(nos, rows[i].Item)
		}
	}
	if len(nos) == 0 {
		return nil, nil
	}
	var found []struct {
		Item     int64
		OrderID  *int64
		Refunded bool
	}
	if err := tx.Raw("SELECT item, order_id, refunded FROM items WHERE voucher_id = ? AND item IN ? FOR UPDATE", v, nos).
		Scan(&found).Error; err != nil {
		return nil, fmt.Errorf("lock items of voucher %d: %w", v, err)
	}
	out := make(map[int64]int64, len(nos))
	for _, n := range nos {
		out[n] = -1
	}
	for _, f := range found {
		switch {
		case f.OrderID != nil:
			out[f.Item] = *f.OrderID
		case !f.Refunded:
			out[f.Item] = 0
		}
	}
	return out, nil
}

// assignItems gives each kept order its item: one conditional UPDATE for
// the batch (an item already held changes nothing, and then the count
// does not match and the transaction is refused).
func assignItems(tx *gorm.DB, v int64, kept []*Order) error {
	if len(kept) == 0 {
		return nil
	}
	var ord, usr strings.Builder
	args := make([]any, 0, 4*len(kept)+2)
	nos := make([]int64, len(kept))
	ord.WriteString("CASE item")
	for i, r := range kept {
		ord.WriteString(" WHEN ? THEN ?")
		args = append(args, r.Item, r.ID)
		nos[i] = r.Item
	}
	ord.WriteString(" END")
	usr.WriteString("CASE item")
	for _, r := range kept {
		usr.WriteString(" WHEN ? THEN ?")
		args = append(args, r.Item, r.UserID)
	}
	usr.WriteString(" END")
	args = append(args, v, nos)
	res := tx.Exec("UPDATE items SET order_id = "+ord.String()+", user_id = "+usr.String()+
		" WHERE voucher_id = ? AND item IN ? AND order_id IS NULL AND refunded = 0", args...)
	if res.Error != nil {
		return fmt.Errorf("assign %d items of voucher %d: %w", len(kept), v, res.Error)
	}
	if res.RowsAffected != int64(len(kept)) {
		return fmt.Errorf("assign items of voucher %d: %d of %d locked items free", v, res.RowsAffected, len(kept))
	}
	return nil
}

// freeItems returns the items of orders ids to the pool (their orders are
// being cancelled).
func freeItems(tx *gorm.DB, ids []int64) error {
	if err := tx.Exec("UPDATE items SET order_id = NULL, user_id = NULL WHERE order_id IN ?", ids).Error; err != nil {
		return fmt.Errorf("free the items of %d orders: %w", len(ids), err)
	}
	return nil
}

// FreeItems returns voucher v's items no order holds and nobody was
// refunded, by item number: the pool MySQL says Redis should hold, before
// the orders in flight take theirs.
func (s *Store) FreeItems(ctx context.Context, v int64) ([]order.Item, error) {
	return unheldItems(s.db.WithContext(ctx), v)
}

func unheldItems(tx *gorm.DB, v int64) ([]order.Item, error) {
	var rows []struct {
		Item   int64
		Amount int64
		Code   string
	}
	err := tx.Raw("SELECT item, amount, code FROM items WHERE voucher_id = ? AND order_id IS NULL AND refunded = 0 ORDER BY item", v).
		Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("free items of voucher %d: %w", v, err)
	}
	out := make([]order.Item, len(rows))
	for i, r := range rows {
		out[i] = order.Item{No: r.Item, Amount: r.Amount, Code: r.Code}
	}
	return out, nil
}

// Amounts is where an envelope voucher's money is.
type Amounts struct {
	Grabbed   int64 // held by completed orders
	Remaining int64 // in envelopes nobody holds, not refunded
	Refunded  int64 // refunded to the sender (vouchers.refunded_amount)
}

// VoucherAmounts reads voucher v's amounts from its items.
func (s *Store) VoucherAmounts(ctx context.Context, v int64) (Amounts, error) {
	var a Amounts
	err := s.db.WithContext(ctx).Raw(`SELECT
			COALESCE(SUM(CASE WHEN order_id IS NOT NULL THEN amount END), 0) AS grabbed,
			COALESCE(SUM(CASE WHEN order_id IS NULL AND refunded = 0 THEN amount END), 0) AS remaining,
			COALESCE(SUM(CASE WHEN refunded = 1 THEN amount END), 0) AS refunded
		FROM items WHERE voucher_id = ?`, v).Scan(&a).Error
	if err != nil {
		return a, fmt.Errorf("amounts of voucher %d: %w", v, err)
	}
	return a, nil
}

// RefundDue returns the vouchers of kinds whose sale ended at or before
// endedBy and that were not refunded yet.
func (s *Store) RefundDue(ctx context.Context, kinds []string, endedBy time.Time, limit int) ([]Voucher, error) {
	var out []Voucher
	if len(kinds) == 0 {
		return nil, nil
	}
	err := s.db.WithContext(ctx).Where("kind IN ? AND refunded_at IS NULL AND ends_at <= ?", kinds, endedBy).
		Order("ends_at").Limit(limit).Find(&out).Error
	return out, err
}

// Refund records what nobody took of voucher v as refunded to the sender,
// exactly once: under the voucher's row lock, only while refunded_at is
// unset. It marks the unowned items refunded, adds their amount to
// refunded_amount and takes them out of stock. done is false when another
// reaper refunded it first (amount is then 0).
func (s *Store) Refund(ctx context.Context, v int64, now time.Time) (amount int64, done bool, err error) {
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var open int64
		if err := tx.Raw("SELECT COUNT(*) FROM vouchers WHERE id = ? AND refunded_at IS NULL FOR UPDATE", v).Scan(&open).Error; err != nil {
			return fmt.Errorf("lock voucher %d: %w", v, err)
		}
		if open == 0 {
			return nil
		}
		var left struct{ N, Amount int64 }
		if err := tx.Raw("SELECT COUNT(*) AS n, COALESCE(SUM(amount), 0) AS amount FROM items WHERE voucher_id = ? AND order_id IS NULL AND refunded = 0 FOR UPDATE", v).
			Scan(&left).Error; err != nil {
			return fmt.Errorf("unowned items of voucher %d: %w", v, err)
		}
		if err := tx.Exec("UPDATE items SET refunded = 1 WHERE voucher_id = ? AND order_id IS NULL AND refunded = 0", v).Error; err != nil {
			return fmt.Errorf("refund items of voucher %d: %w", v, err)
		}
		if err := tx.Exec("UPDATE vouchers SET refunded_amount = refunded_amount + ?, refunded_at = ?, stock = stock - ? WHERE id = ?",
			left.Amount, now, left.N, v).Error; err != nil {
			return fmt.Errorf("refund voucher %d: %w", v, err)
		}
		amount, done = left.Amount, true
		return nil
	}, readCommitted)
	return amount, done, err
}
