package rdb

// Dead letters: orders that could not be persisted, moved aside with
// their reason. Their format is here, written and read; what an operator
// does with them is pkg/rdb/upkeep's.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/pkg/order"
)

// DeadLetter copies order e with reason to the partition's dead-letter
// stream. It does not acknowledge e's stream entry, which may carry other
// orders: the caller acknowledges it (Ack) once every order it carries is
// done. A crash between the two may dead-letter an order twice (the
// entry is delivered again); requeueing it persists it once.
func (s *Store) DeadLetter(ctx context.Context, e StreamOrder, reason string) error {
	values := []any{
		"stream_id", e.StreamID, "order_id", formatID(e.Order.ID), "voucher_id", formatID(e.Order.VoucherID),
		"user_id", e.Order.UserID, "day", e.Order.Day, "quantity", e.Order.Units(), "reason", reason,
		"created_ms", e.Order.CreatedAt.UnixMilli(), "item", e.Order.Item.Encode(),
	}
	if e.Order.Entry {
		values = append(values, "entry", "1")
	}
	if err := s.c.XAdd(ctx, &redis.XAddArgs{Stream: DeadKey(e.Partition), Values: values}).Err(); err != nil {
		return fmt.Errorf("dead-letter %s: %w", e.StreamID, err)
	}
	return nil
}

// DeadEntry is one dead letter: the order it carried, as far as it could be
// read, and why it was dead-lettered.
type DeadEntry struct {
	DeadID    string    `json:"dead_id"`
	Partition int       `json:"partition"`
	StreamID  string    `json:"stream_id"`
	OrderID   string    `json:"order_id"`
	VoucherID string    `json:"voucher_id"`
	UserID    string    `json:"user_id"`
	Quantity  string    `json:"quantity"`
	Reason    string    `json:"reason"`
	DeadAt    time.Time `json:"dead_lettered_at"`
	// Order is the stream entry it was, to be processed again (requeued);
	// Order.Err says why it cannot be (not an order, or dead-lettered by
	// a version that did not keep the whole order).
	Order StreamOrder `json:"-"`
}

// ParseDeadLetter reads dead letter m of partition p, as DeadLetter
// wrote it.
func ParseDeadLetter(p int, m redis.XMessage) DeadEntry {
	field := func(k string) string { v, _ := m.Values[k].(string); return v }
	d := DeadEntry{DeadID: m.ID, Partition: p, StreamID: field("stream_id"), OrderID: field("order_id"),
		VoucherID: field("voucher_id"), UserID: field("user_id"), Quantity: field("quantity"), Reason: field("reason")}
	if ms, err := strconv.ParseInt(strings.SplitN(m.ID, "-", 2)[0], 10, 64); err == nil {
		d.DeadAt = time.UnixMilli(ms).UTC()
	}
	d.Order = deadLetterOrder(p, m.ID, field)
	return d
}

// deadLetterOrder is the order dead letter deadID (of partition p, its fields
// read by field) holds, to be processed again: its id is the one it was
// dead-lettered with, and it must lead back to the stream entry it came
// from.
func deadLetterOrder(p int, deadID string, field func(string) string) StreamOrder {
	e := StreamOrder{Partition: p, StreamID: field("stream_id"), Index: -1}
	id, err := strconv.ParseInt(field("order_id"), 10, 64)
	if err != nil || field("created_ms") == "" {
		e.Err = fmt.Errorf("dead letter %s does not hold its whole order", deadID)
		return e
	}
	if _, entry, index := order.EntryOf(id); entry == e.StreamID {
		e.Index = index // an order of a stream entry of several
	} else if old, err := order.IDFromPosition(e.StreamID, p); err != nil || old != id {
		e.Err = fmt.Errorf("dead letter %s: order %d is not of stream entry %q", deadID, id, e.StreamID)
		return e
	}
	e.Order, e.Err = parseOrder(e.StreamID, id, field("voucher_id"), field("user_id"), field("created_ms"), field("day"),
		field("quantity"), field("item"), field("entry") == "1")
	return e
}
