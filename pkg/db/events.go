package db

// The outbox of order events (sql/0015_events.sql, docs/EVENTS.md): each
// transaction that takes orders to a status writes their events with the
// change (recordEvents), so an event exists if and only if its change
// committed. The reaper gives committed events their sequence
// (SequenceEvents), which the sinks publish in.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
)

// Event is a row of events: an order's change, with the order as the
// change left it.
type Event struct {
	ID         int64 `gorm:"primaryKey"`
	Sequence   *int64
	OrderID    int64
	VoucherID  int64
	UserID     string
	Status     string
	Reason     string
	Quantity   int64
	Amount     int64
	Code       string
	Drawn      int
	CreatedAt  time.Time
	ExpiresAt  time.Time
	PaidAt     *time.Time
	OccurredAt time.Time
}

// Order is the order as the event's change left it.
func (e Event) Order() Order {
	return Order{ID: e.OrderID, VoucherID: e.VoucherID, UserID: e.UserID, Quantity: e.Quantity, Amount: e.Amount, Code: e.Code,
		Status: e.Status, Reason: e.Reason, CreatedAt: e.CreatedAt, ExpiresAt: e.ExpiresAt, PaidAt: e.PaidAt, Drawn: e.Drawn}
}

// eventColumns are the columns recordEvents copies from orders.
const eventColumns = "order_id, voucher_id, user_id, status, reason, quantity, amount, code, drawn, created_at, expires_at, paid_at, occurred_at"

// recordEvents writes, in tx, the events of the orders ids as they are
// now in tx (their new status), with reason (""; the orders' own). Call
// it after the change, in the change's transaction.
func recordEvents(tx *gorm.DB, ids []int64, reason string) error {
	if len(ids) == 0 {
		return nil
	}
	reasonSQL := "reason"
	args := []any{}
	if reason != "" {
		reasonSQL = "?"
		args = append(args, reason)
	}
	for i := 0; i < len(ids); i += 1000 {
		chunk := ids[i:min(i+1000, len(ids))]
		q := "INSERT INTO events (" + eventColumns + ") SELECT id, voucher_id, user_id, status, " + reasonSQL +
			", quantity, amount, code, drawn, created_at, expires_at, paid_at, UTC_TIMESTAMP(3) FROM orders WHERE id IN ? ORDER BY id"
		res := tx.Exec(q, append(args, chunk)...)
		if res.Error != nil {
			return fmt.Errorf("record %d events: %w", len(chunk), res.Error)
		}
		if res.RowsAffected != int64(len(chunk)) {
			return fmt.Errorf("record events: %d of %d orders found", res.RowsAffected, len(chunk))
		}
	}
	return nil
}

// recordEventsWhere is recordEvents of the orders a condition selects
// (those the change just made, in tx).
func recordEventsWhere(tx *gorm.DB, where string, args ...any) error {
	var ids []int64
	if err := tx.Raw("SELECT id FROM orders WHERE "+where+" ORDER BY id", args...).Scan(&ids).Error; err != nil {
		return fmt.Errorf("find changed orders: %w", err)
	}
	return recordEvents(tx, ids, "")
}

// SequenceEvents gives up to limit committed events without a sequence
// the next sequences, in the order they were written, and returns how
// many it gave. event_sequence's row lock makes several reapers sequence
// one after another: the sequences given are 1, 2, 3, ... with no gap and
// none twice. An event written by a transaction still open is sequenced
// by a later call.
func (s *Store) SequenceEvents(ctx context.Context, limit int) (int, error) {
	n := 0
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var last int64
		if err := tx.Raw("SELECT last FROM event_sequence WHERE id = 1 FOR UPDATE").Scan(&last).Error; err != nil {
			return fmt.Errorf("lock the event sequence: %w", err)
		}
		var ids []int64
		if err := tx.Raw("SELECT id FROM events WHERE sequence IS NULL ORDER BY id LIMIT ?", limit).Scan(&ids).Error; err != nil {
			return fmt.Errorf("find unsequenced events: %w", err)
		}
		if len(ids) == 0 {
			return nil
		}
		var b strings.Builder
		args := make([]any, 0, 2*len(ids)+1)
		b.WriteString("UPDATE events SET sequence = CASE id")
		for i, id := range ids {
			b.WriteString(" WHEN ? THEN ?")
			args = append(args, id, last+int64(i)+1)
		}
		b.WriteString(" END WHERE id IN ? AND sequence IS NULL")
		res := tx.Exec(b.String(), append(args, ids)...)
		if res.Error != nil {
			return fmt.Errorf("sequence %d events: %w", len(ids), res.Error)
		}
		if res.RowsAffected != int64(len(ids)) {
			return fmt.Errorf("sequence events: %d of %d changed", res.RowsAffected, len(ids))
		}
		n = len(ids)
		return tx.Exec("UPDATE event_sequence SET last = ? WHERE id = 1", last+int64(n)).Error
	}, readCommitted)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Events returns up to limit sequenced events after sequence after, in
// sequence order.
func (s *Store) Events(ctx context.Context, after int64, limit int) ([]Event, error) {
	var out []Event
	err := s.db.WithContext(ctx).Where("sequence > ?", after).Order("sequence").Limit(limit).Find(&out).Error
	return out, err
}

// EventBacklog is how many events wait for their sequence, and when the
// oldest of them was written (zero: none).
func (s *Store) EventBacklog(ctx context.Context) (int64, time.Time, error) {
	var row struct {
		N      int64
		Oldest *time.Time
	}
	err := s.db.WithContext(ctx).Raw("SELECT COUNT(*) AS n, MIN(occurred_at) AS oldest FROM events WHERE sequence IS NULL").Scan(&row).Error
	if err != nil || row.Oldest == nil {
		return row.N, time.Time{}, err
	}
	return row.N, *row.Oldest, nil
}

// DeleteEventsBefore deletes sequenced events that occurred before cutoff,
// oldest sequence first and never past a younger one (what is kept is a
// run of sequences with no hole), at most limit; it returns how many.
func (s *Store) DeleteEventsBefore(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	var page []struct {
		Sequence   int64
		OccurredAt time.Time
	}
	db := s.db.WithContext(ctx)
	if err := db.Raw("SELECT sequence, occurred_at FROM events WHERE sequence IS NOT NULL ORDER BY sequence LIMIT ?", limit).
		Scan(&page).Error; err != nil {
		return 0, fmt.Errorf("find old events: %w", err)
	}
	upto := int64(-1)
	for _, e := range page {
		if !e.OccurredAt.Before(cutoff) {
			break
		}
		upto = e.Sequence
	}
	if upto < 0 {
		return 0, nil
	}
	res := db.Exec("DELETE FROM events WHERE sequence IS NOT NULL AND sequence <= ?", upto)
	if res.Error != nil {
		return 0, fmt.Errorf("delete old events: %w", res.Error)
	}
	return int(res.RowsAffected), nil
}
