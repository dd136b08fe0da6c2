package rdb

// Consuming the order streams: the consumer group, reading, acknowledging
// and holding entries (the workers' and the reaper's path).

import (
	"context"
	"errors"
	"fmt"
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
// exist (e.g. Redis restarted without its data), however wrapped.
func IsNoGroup(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOGROUP")
}

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
