package rdb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/lua"
	"github.com/flashsale/flashsale/pkg/order"
)

// Entry is one stream entry read by a consumer.
type Entry struct {
	Partition int
	StreamID  string
	Order     order.Order
	// Err is set when the entry is not a valid order (a poison message).
	Err error
}

// EnsureGroups creates the consumer group on every partition's stream (and
// the stream itself) if missing. The group starts at the beginning of the
// stream, so orders admitted before any worker ran are not skipped.
func (s *Store) EnsureGroups(ctx context.Context) error {
	for p := range s.partitions {
		err := s.c.XGroupCreateMkStream(ctx, StreamKey(p), s.group, "0").Err()
		if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
			return fmt.Errorf("create group on %s: %w", StreamKey(p), err)
		}
	}
	return nil
}

// IsNoGroup reports the error of reading a stream or group that does not
// exist (e.g. Redis restarted without its data).
func IsNoGroup(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOGROUP") }

// ReadGroup reads up to count entries of partition p for consumer. start ">"
// reads new entries, blocking up to block; any other id re-reads the
// consumer's own pending entries after it, without blocking.
func (s *Store) ReadGroup(ctx context.Context, p int, consumer, start string, count int, block time.Duration) ([]Entry, error) {
	if start != ">" {
		block = -1
	}
	res, err := s.c.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: s.group, Consumer: consumer, Streams: []string{StreamKey(p), start},
		Count: int64(count), Block: block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("xreadgroup %s: %w", StreamKey(p), err)
	}
	var out []Entry
	for _, st := range res {
		for _, m := range st.Messages {
			out = append(out, parseEntry(p, m))
		}
	}
	return out, nil
}

// maxCreatedMs is 9000-01-01: a creation time past it cannot be an order's
// (and MySQL's DATETIME would refuse it).
var maxCreatedMs = time.Date(9000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

func parseEntry(p int, m redis.XMessage) Entry {
	e := Entry{Partition: p, StreamID: m.ID}
	field := func(k string) string { s, _ := m.Values[k].(string); return s }
	id, err := order.IDFromEntry(m.ID, p)
	if err != nil {
		e.Err = err
		return e
	}
	v, errV := strconv.ParseInt(field("voucher_id"), 10, 64)
	ms, errT := strconv.ParseInt(field("created_ms"), 10, 64)
	user, day := field("user_id"), field("day")
	// Entries admitted before quantities existed carry none: one unit.
	qty, errQ := int64(1), error(nil)
	if q := field("quantity"); q != "" {
		qty, errQ = strconv.ParseInt(q, 10, 64)
	}
	item, errI := order.ParseItem(field("item"))
	switch {
	case errI != nil:
		e.Err = fmt.Errorf("entry %s: %w", m.ID, errI)
	case errV != nil || v <= 0:
		e.Err = fmt.Errorf("entry %s: bad voucher_id %q", m.ID, field("voucher_id"))
	case errT != nil || ms < order.Epoch.UnixMilli() || ms >= maxCreatedMs:
		e.Err = fmt.Errorf("entry %s: bad created_ms %q", m.ID, field("created_ms"))
	case user == "" || len(user) > 64:
		e.Err = fmt.Errorf("entry %s: bad user_id %q", m.ID, user)
	case len(day) != 8:
		e.Err = fmt.Errorf("entry %s: bad day %q", m.ID, day)
	case errQ != nil || qty < 1 || qty > order.MaxQuantity:
		e.Err = fmt.Errorf("entry %s: bad quantity %q", m.ID, field("quantity"))
	}
	e.Order = order.Order{ID: id, VoucherID: v, UserID: user, CreatedAt: time.UnixMilli(ms).UTC(), Day: day, Quantity: qty, Item: item,
		Entry: field("entry") == "1"}
	return e
}

// Ack acknowledges persisted entries of partition p and deletes them from the
// stream (ack.lua). Call it only after the MySQL commit.
func (s *Store) Ack(ctx context.Context, p int, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	args := make([]any, 0, len(ids)+1)
	args = append(args, s.group)
	for _, id := range ids {
		args = append(args, id)
	}
	if err := lua.Ack.Run(ctx, s.c, []string{StreamKey(p)}, args...).Err(); err != nil {
		return fmt.Errorf("ack %d entries on %s: %w", len(ids), StreamKey(p), err)
	}
	return nil
}

// RenewLease resets the idle time of the entries of partition p that
// consumer still owns (lease.lua) and returns how many it renewed.
func (s *Store) RenewLease(ctx context.Context, p int, consumer string, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	args := make([]any, 0, len(ids)+2)
	args = append(args, s.group, consumer)
	for _, id := range ids {
		args = append(args, id)
	}
	n, err := lua.Lease.Run(ctx, s.c, []string{StreamKey(p)}, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("renew lease on %s: %w", StreamKey(p), err)
	}
	return n, nil
}

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

// PendingOrder finds order id while it is still in its stream (admitted, not
// yet persisted).
func (s *Store) PendingOrder(ctx context.Context, id int64) (order.Order, bool, error) {
	p, entry := order.EntryOf(id)
	if p >= s.partitions {
		return order.Order{}, false, nil
	}
	msgs, err := s.c.XRange(ctx, StreamKey(p), entry, entry).Result()
	if err != nil {
		return order.Order{}, false, fmt.Errorf("xrange %s: %w", StreamKey(p), err)
	}
	if len(msgs) == 0 {
		return order.Order{}, false, nil
	}
	e := parseEntry(p, msgs[0])
	return e.Order, e.Err == nil, nil
}

// Backlog is the state of one partition's stream.
type Backlog struct {
	Partition   int   `json:"partition"`
	Length      int64 `json:"length"`       // entries not yet persisted
	Pending     int64 `json:"pending"`      // delivered to a worker, not yet acknowledged
	DeadLetters int64 `json:"dead_letters"` // entries in the dead-letter stream
}

// PartitionBacklog reads the backlog of partition p.
func (s *Store) PartitionBacklog(ctx context.Context, p int) (Backlog, error) {
	b := Backlog{Partition: p}
	pipe := s.c.Pipeline()
	xlen := pipe.XLen(ctx, StreamKey(p))
	pend := pipe.XPending(ctx, StreamKey(p), s.group)
	dead := pipe.XLen(ctx, DeadKey(p))
	_, err := pipe.Exec(ctx)
	if err != nil && !errors.Is(err, redis.Nil) && !IsNoGroup(err) {
		return b, fmt.Errorf("backlog of %s: %w", StreamKey(p), err)
	}
	b.Length, b.DeadLetters = xlen.Val(), dead.Val()
	if pend.Err() == nil {
		b.Pending = pend.Val().Count
	}
	return b, nil
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

// UserPending returns user's orders of voucher v still in the stream
// (admitted, not yet persisted), oldest first. They are found by the
// user's index in the bucket that decides the user's claims (admit.lua
// appends every admission's entry id to it; pending.lua reads those
// entries and forgets the ones persisted), so the cost is bounded by the
// user's own orders, however long the stream is, and
// a hot voucher's orders are found in whichever bucket's stream they are.
func (s *Store) UserPending(ctx context.Context, v int64, user string) ([]order.Order, error) {
	b, err := s.userBucket(ctx, v, user)
	if err != nil {
		return nil, err
	}
	raw, err := lua.Pending.Run(ctx, s.c, []string{b.key(), b.stream()}, user).Slice()
	if err != nil {
		return nil, fmt.Errorf("pending orders of user in %s: %w", b.key(), err)
	}
	var out []order.Order
	for _, r := range raw {
		m, err := xMessage(r)
		if err != nil {
			return nil, fmt.Errorf("pending orders in %s: %w", b.stream(), err)
		}
		if e := parseEntry(b.p, m); e.Err == nil && e.Order.VoucherID == v && e.Order.UserID == user {
			out = append(out, e.Order)
		}
	}
	return out, nil
}

// xMessage reads one entry as a script returns XRANGE's reply:
// {id, {field, value, ...}}.
func xMessage(r any) (redis.XMessage, error) {
	pair, ok := r.([]any)
	if !ok || len(pair) != 2 {
		return redis.XMessage{}, fmt.Errorf("not a stream entry: %v", r)
	}
	id, ok := pair[0].(string)
	fields, ok2 := pair[1].([]any)
	if !ok || !ok2 || len(fields)%2 != 0 {
		return redis.XMessage{}, fmt.Errorf("not a stream entry: %v", r)
	}
	m := redis.XMessage{ID: id, Values: make(map[string]any, len(fields)/2)}
	for i := 0; i < len(fields); i += 2 {
		k, ok := fields[i].(string)
		if !ok {
			return redis.XMessage{}, fmt.Errorf("not a stream entry: %v", r)
		}
		m.Values[k] = fields[i+1]
	}
	return m, nil
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

// streamPage is how many entries scanStream reads at a time.
const streamPage = 1000

// scanStream reads stream key oldest first, streamPage entries at a time,
// handing each page to page until it returns true (stop) or the stream
// ends: the one pager of every full read of a stream.
func (s *Store) scanStream(ctx context.Context, key string, page func([]redis.XMessage) (stop bool)) error {
	start := "-"
	for {
		msgs, err := s.c.XRangeN(ctx, key, start, "+", streamPage).Result()
		if err != nil {
			return fmt.Errorf("xrange %s: %w", key, err)
		}
		if page(msgs) || len(msgs) < streamPage {
			return nil
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}

// VoucherBacklog reads the backlog of every stream of voucher v (its
// buckets' partitions), home partition first. A partition's figures count
// every voucher's entries in it, not only v's.
func (s *Store) VoucherBacklog(ctx context.Context, v int64) ([]Backlog, error) {
	parts, err := s.PartitionsOfVoucher(ctx, v)
	if err != nil {
		return nil, err
	}
	out := make([]Backlog, 0, len(parts))
	for _, p := range parts {
		b, err := s.PartitionBacklog(ctx, p)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// DeleteDeadLetters deletes dead letters ids of partition p.
func (s *Store) DeleteDeadLetters(ctx context.Context, p int, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	return s.c.XDel(ctx, DeadKey(p), ids...).Err()
}

// InFlight reports whether a stream of voucher v (each of its buckets')
// still holds an entry of it: an order admitted but not yet persisted (nor
// dead-lettered). The streams hold only such entries, so after a sale they
// are short.
func (s *Store) InFlight(ctx context.Context, v int64) (bool, error) {
	parts, err := s.PartitionsOfVoucher(ctx, v)
	if err != nil {
		return false, err
	}
	want := formatID(v)
	found := false
	for _, p := range parts {
		err := s.scanStream(ctx, StreamKey(p), func(msgs []redis.XMessage) bool {
			found = slices.ContainsFunc(msgs, func(m redis.XMessage) bool { id, _ := m.Values["voucher_id"].(string); return id == want })
			return found
		})
		if err != nil || found {
			return found, err
		}
	}
	return false, nil
}
