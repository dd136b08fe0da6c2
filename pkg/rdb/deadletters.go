package rdb

// Dead letters: entries that could not be persisted, moved aside with
// their reason, and what an operator does with them.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// DeadLetter copies e with reason to the partition's dead-letter stream and
// acknowledges it, in one transaction.
func (s *Store) DeadLetter(ctx context.Context, e Entry, reason string) error {
	_, err := s.c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: DeadKey(e.Partition), Values: []any{
			"stream_id", e.StreamID, "order_id", formatID(e.Order.ID), "voucher_id", formatID(e.Order.VoucherID),
			"user_id", e.Order.UserID, "day", e.Order.Day, "quantity", e.Order.Units(), "reason", reason,
			"created_ms", e.Order.CreatedAt.UnixMilli(), "item", e.Order.Item.Encode(),
		}})
		pipe.XAck(ctx, StreamKey(e.Partition), s.group, e.StreamID)
		pipe.XDel(ctx, StreamKey(e.Partition), e.StreamID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("dead-letter %s: %w", e.StreamID, err)
	}
	return nil
}

// DeadLetterStats describes one partition's dead-letter stream.
type DeadLetterStats struct {
	Partition int       `json:"partition"`
	Count     int64     `json:"count"`
	Oldest    time.Time `json:"oldest,omitzero"` // when the oldest entry was dead-lettered; zero (and absent from JSON) if none
}

// DeadLetterStats reads partition p's dead-letter stream's length and age.
func (s *Store) DeadLetterStats(ctx context.Context, p int) (DeadLetterStats, error) {
	st := DeadLetterStats{Partition: p}
	var err error
	if st.Count, err = s.c.XLen(ctx, DeadKey(p)).Result(); err != nil {
		return st, fmt.Errorf("xlen %s: %w", DeadKey(p), err)
	}
	first, err := s.c.XRangeN(ctx, DeadKey(p), "-", "+", 1).Result()
	if err != nil {
		return st, fmt.Errorf("xrange %s: %w", DeadKey(p), err)
	}
	if len(first) == 1 {
		if ms, err := strconv.ParseInt(strings.SplitN(first[0].ID, "-", 2)[0], 10, 64); err == nil {
			st.Oldest = time.UnixMilli(ms).UTC()
		}
	}
	return st, nil
}

// TrimDeadLetters deletes partition p's dead letters dead-lettered before
// before (XTRIM MINID) and returns how many went. Dead letters are never
// trimmed on their own: this is the operator's explicit action, after
// reading them (see docs/RUNBOOK.md).
func (s *Store) TrimDeadLetters(ctx context.Context, p int, before time.Time) (int64, error) {
	n, err := s.c.XTrimMinID(ctx, DeadKey(p), strconv.FormatInt(before.UnixMilli(), 10)+"-0").Result()
	if err != nil {
		return 0, fmt.Errorf("xtrim %s: %w", DeadKey(p), err)
	}
	return n, nil
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
	// Entry is the stream entry it was, to be processed again (requeued);
	// Entry.Err says why it cannot be (not an order, or dead-lettered by
	// a version that did not keep the whole order).
	Entry Entry `json:"-"`
}

// DeadLetters returns partition p's dead letters, oldest first.
func (s *Store) DeadLetters(ctx context.Context, p int) ([]DeadEntry, error) {
	var out []DeadEntry
	err := s.scanStream(ctx, DeadKey(p), func(msgs []redis.XMessage) bool {
		for _, m := range msgs {
			field := func(k string) string { v, _ := m.Values[k].(string); return v }
			d := DeadEntry{DeadID: m.ID, Partition: p, StreamID: field("stream_id"), OrderID: field("order_id"),
				VoucherID: field("voucher_id"), UserID: field("user_id"), Quantity: field("quantity"), Reason: field("reason")}
			if ms, err := strconv.ParseInt(strings.SplitN(m.ID, "-", 2)[0], 10, 64); err == nil {
				d.DeadAt = time.UnixMilli(ms).UTC()
			}
			d.Entry = parseEntry(p, redis.XMessage{ID: d.StreamID, Values: m.Values})
			if d.Entry.Err == nil && (field("created_ms") == "" || formatID(d.Entry.Order.ID) != d.OrderID) {
				d.Entry.Err = fmt.Errorf("dead letter %s does not hold its whole order", m.ID)
			}
			out = append(out, d)
		}
		return false
	})
	return out, err
}

// DeleteDeadLetters deletes dead letters ids of partition p.
func (s *Store) DeleteDeadLetters(ctx context.Context, p int, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	return s.c.XDel(ctx, DeadKey(p), ids...).Err()
}
