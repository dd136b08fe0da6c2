package rdb

// Consuming the order streams: the consumer group, reading, acknowledging
// and holding entries (the workers' and the reaper's path).

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

// StreamOrder is one order read from a stream by a consumer. A stream entry
// carries the orders of one admission call (admit.lua), each read as a
// StreamOrder of its own; they are acknowledged together, by their StreamID.
type StreamOrder struct {
	Partition int
	StreamID  string
	// Index is the order's place in its stream entry (its oK field), from
	// 0; -1 for a stream entry that holds a single order in the fields of
	// the version before (user_id, created_ms, ...) or no order at all.
	Index int
	Order order.Order
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
// exist (e.g. Redis restarted without its data), however wrapped.
func IsNoGroup(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOGROUP")
}

// ReadGroup reads up to count entries of partition p for consumer. start ">"
// reads new entries, blocking up to block; any other id re-reads the
// consumer's own pending entries after it, without blocking.
func (s *Store) ReadGroup(ctx context.Context, p int, consumer, start string, count int, block time.Duration) ([]StreamOrder, error) {
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
	var out []StreamOrder
	for _, st := range res {
		for _, m := range st.Messages {
			out = append(out, ParseEntries(p, m)...)
		}
	}
	return out, nil
}

// asRedisWritesIt reports whether id is a stream entry id in the form
// Redis gives it: "ms-seq", each a decimal without a sign or a leading 0.
func asRedisWritesIt(id string) bool {
	ms, seq, ok := strings.Cut(id, "-")
	return ok && decimal(ms) && decimal(seq)
}

func decimal(s string) bool {
	if s == "" || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// maxCreatedMs is 9000-01-01: a creation time past it cannot be an order's
// (and MySQL's DATETIME would refuse it).
var maxCreatedMs = time.Date(9000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

// ParseEntries reads the orders of stream entry m of partition p, in their
// order: one StreamOrder each, one with Err for an order field that cannot
// be read, and a single one with Err when m holds no order at all.
func ParseEntries(p int, m redis.XMessage) []StreamOrder {
	field := func(k string) string { s, _ := m.Values[k].(string); return s }
	if _, old := m.Values["user_id"]; old {
		e := StreamOrder{Partition: p, StreamID: m.ID, Index: -1}
		id, err := order.IDFromPosition(m.ID, p)
		if err != nil {
			e.Err = err
			return []StreamOrder{e}
		}
		e.Order, e.Err = parseOrder(m.ID, id, field("voucher_id"), field("user_id"), field("created_ms"), field("day"),
			field("quantity"), field("item"), field("entry") == "1")
		return []StreamOrder{e}
	}
	if !asRedisWritesIt(m.ID) {
		// An order's id leads back to its entry's id as Redis writes it:
		// "00001710000000000-0" would name the entry "1710000000000-0".
		return []StreamOrder{{Partition: p, StreamID: m.ID, Index: -1,
			Err: fmt.Errorf("%w: %q is not an id as Redis writes it", order.ErrBadEntryID, m.ID)}}
	}
	var out []StreamOrder
	for k, raw := range m.Values {
		i, ok := orderField(k)
		if !ok {
			continue
		}
		e := StreamOrder{Partition: p, StreamID: m.ID, Index: i}
		id, err := order.IDOf(m.ID, i, p)
		value, _ := raw.(string)
		parts := strings.Split(value, " ")
		var serial uint64
		var serr error
		if last := parts[len(parts)-1]; len(parts) > 4 && strings.HasPrefix(last, "c") {
			serial, serr = parseSerial(last[1:])
			parts = parts[:len(parts)-1]
		}
		switch {
		case err != nil:
			e.Err = err
		case len(parts) != 4 && len(parts) != 5, serr != nil:
			e.Err = fmt.Errorf("entry %s: %s is not an order: %q", m.ID, k, value)
		default:
			item, entry := "", false
			if len(parts) == 5 {
				item, entry = parts[4], parts[4] == "entry"
				if entry {
					item = ""
				}
			}
			e.Order, e.Err = parseOrder(m.ID, id, field("voucher_id"), parts[0], parts[1], parts[2], parts[3], item, entry)
			e.Order.Claim = serial
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return []StreamOrder{{Partition: p, StreamID: m.ID, Index: -1, Err: fmt.Errorf("entry %s holds no order", m.ID)}}
	}
	slices.SortFunc(out, func(a, b StreamOrder) int { return a.Index - b.Index })
	return out
}

// parseSerial reads a claim's serial as admit.lua writes it into an
// order: hex, lower case, no leading zero, not zero.
func parseSerial(s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 16, 64)
	if err != nil || n == 0 || strconv.FormatUint(n, 16) != s {
		return 0, fmt.Errorf("bad claim serial %q", s)
	}
	return n, nil
}

// orderField reads the index K of an order field "oK" (0 <= K <
// order.MaxPerEntry, no leading zeros).
func orderField(k string) (int, bool) {
	if len(k) < 2 || len(k) > 3 || k[0] != 'o' || (len(k) == 3 && k[1] == '0') {
		return 0, false
	}
	i, err := strconv.Atoi(k[1:])
	return i, err == nil && i >= 0 && i < order.MaxPerEntry
}

// parseOrder checks and builds order id from its fields as a stream entry
// (or a dead letter) holds them; the error names stream entry sid.
func parseOrder(sid string, id int64, voucher, user, created, day, quantity, rawItem string, entry bool) (order.Order, error) {
	v, errV := strconv.ParseInt(voucher, 10, 64)
	ms, errT := strconv.ParseInt(created, 10, 64)
	// Orders admitted before quantities existed carry none: one unit.
	qty, errQ := int64(1), error(nil)
	if quantity != "" {
		qty, errQ = strconv.ParseInt(quantity, 10, 64)
	}
	item, errI := order.ParseItem(rawItem)
	var err error
	switch {
	case errI != nil:
		err = fmt.Errorf("entry %s: %w", sid, errI)
	case errV != nil || v <= 0:
		err = fmt.Errorf("entry %s: bad voucher_id %q", sid, voucher)
	case errT != nil || ms < order.Epoch.UnixMilli() || ms >= maxCreatedMs:
		err = fmt.Errorf("entry %s: bad created_ms %q", sid, created)
	case user == "" || len(user) > 64:
		err = fmt.Errorf("entry %s: bad user_id %q", sid, user)
	case len(day) != 8:
		err = fmt.Errorf("entry %s: bad day %q", sid, day)
	case errQ != nil || qty < 1 || qty > order.MaxQuantity:
		err = fmt.Errorf("entry %s: bad quantity %q", sid, quantity)
	}
	return order.Order{ID: id, VoucherID: v, UserID: user, CreatedAt: time.UnixMilli(ms).UTC(), Day: day, Quantity: qty, Item: item,
		Entry: entry}, err
}

// Ack acknowledges the stream entries of batch's orders (of partition p),
// deletes them from the stream and takes their orders off the partition's
// backlog count (ack.lua). Call it only after the MySQL commit of every
// order of those stream entries, batch holding them all.
func (s *Store) Ack(ctx context.Context, p int, batch []StreamOrder) error {
	if len(batch) == 0 {
		return nil
	}
	ids, orders := streamEntries(batch)
	args := make([]any, 0, 2*len(ids)+1)
	args = append(args, s.group)
	for i, id := range ids {
		args = append(args, id, orders[i])
	}
	if err := lua.Ack.Run(ctx, s.c, []string{StreamKey(p), BacklogKey(p)}, args...).Err(); err != nil {
		return fmt.Errorf("ack %d entries on %s: %w", len(ids), StreamKey(p), err)
	}
	return nil
}

// StreamIDs are the distinct stream entries of orders, in their order.
func StreamIDs(orders []StreamOrder) []string {
	ids, _ := streamEntries(orders)
	return ids
}

// streamEntries are the distinct stream entries of batch's orders, in
// their order, and the orders (Index >= 0) each carries among batch.
func streamEntries(batch []StreamOrder) (ids []string, orders []int) {
	for _, e := range batch {
		// An entry's orders are adjacent: the last id is nearly always the one.
		k := len(ids) - 1
		if k < 0 || ids[k] != e.StreamID {
			if k = slices.Index(ids, e.StreamID); k < 0 {
				k = len(ids)
				ids, orders = append(ids, e.StreamID), append(orders, 0)
			}
		}
		if e.Index >= 0 {
			orders[k]++
		}
	}
	return ids, orders
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
