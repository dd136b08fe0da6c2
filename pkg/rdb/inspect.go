package rdb

// Reads of the order streams for the APIs and the gauges: a pending
// order, a user's pending orders, a partition's or a voucher's backlog.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/lua"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb/internal/keyspace"
)

// PendingOrder finds order id while it is still in its stream (admitted, not
// yet persisted).
func (s *Store) PendingOrder(ctx context.Context, id int64) (order.Order, bool, error) {
	p, entry, _ := order.EntryOf(id)
	if p >= s.partitions {
		return order.Order{}, false, nil
	}
	msgs, err := s.c.XRange(ctx, StreamKey(p), entry, entry).Result()
	if err != nil {
		return order.Order{}, false, fmt.Errorf("xrange %s: %w", StreamKey(p), err)
	}
	for _, m := range msgs {
		for _, e := range ParseEntries(p, m) {
			if e.Err == nil && e.Order.ID == id {
				return e.Order, true, nil
			}
		}
	}
	return order.Order{}, false, nil
}

// Backlog is the state of one partition's stream.
type Backlog struct {
	Partition int   `json:"partition"`
	Length    int64 `json:"length"`  // stream entries not yet persisted (one per 32 orders of an admission call)
	Orders    int64 `json:"orders"`  // their orders (BacklogKey)
	Pending   int64 `json:"pending"` // stream entries delivered to a worker, not yet acknowledged
	// DeadLetters are the orders in the dead-letter stream.
	DeadLetters int64 `json:"dead_letters"`
}

// PartitionBacklog reads the backlog of partition p.
func (s *Store) PartitionBacklog(ctx context.Context, p int) (Backlog, error) {
	b := Backlog{Partition: p}
	pipe := s.c.Pipeline()
	xlen := pipe.XLen(ctx, StreamKey(p))
	orders := pipe.Get(ctx, BacklogKey(p))
	pend := pipe.XPending(ctx, StreamKey(p), s.group)
	dead := pipe.XLen(ctx, DeadKey(p))
	_, err := pipe.Exec(ctx)
	if err != nil && !errors.Is(err, redis.Nil) && !IsNoGroup(err) {
		return b, fmt.Errorf("backlog of %s: %w", StreamKey(p), err)
	}
	b.Length, b.DeadLetters = xlen.Val(), dead.Val()
	b.Orders, _ = orders.Int64() // none yet: 0
	if pend.Err() == nil {
		b.Pending = pend.Val().Count
	}
	return b, nil
}

// UserPending returns user's orders of voucher v still in the stream
// (admitted, not yet persisted), oldest first. They are found by the
// user's index in the bucket that decides the user's claims (admit.lua
// appends every admission's position to it; pending.lua reads those
// orders from their entries and forgets the ones persisted), so the cost
// is bounded by the user's own orders, however long the stream is, and a
// hot voucher's orders are found in whichever bucket's stream they are.
func (s *Store) UserPending(ctx context.Context, v int64, user string) ([]order.Order, error) {
	bs, err := s.userBuckets(ctx, v, user)
	if err != nil {
		return nil, err
	}
	var out []order.Order
	for _, b := range bs {
		raw, err := lua.Pending.Run(ctx, s.c, []string{b.Key(), b.Stream()}, user).Slice()
		if err != nil {
			return nil, fmt.Errorf("pending orders of user in %s: %w", b.Key(), err)
		}
		for _, r := range raw {
			m, err := xMessage(r)
			if err != nil {
				return nil, fmt.Errorf("pending orders in %s: %w", b.Stream(), err)
			}
			for _, e := range ParseEntries(b.P, m) {
				if e.Err == nil && e.Order.VoucherID == v && e.Order.UserID == user {
					out = append(out, e.Order)
				}
			}
		}
	}
	return out, nil
}

// userBuckets are the buckets that may index user's pending orders of
// voucher v: the user's bucket at each number of buckets v had (bucket
// 0's was, split.lua) and has, oldest first.
func (s *Store) userBuckets(ctx context.Context, v int64, user string) ([]bucket, error) {
	raw, err := s.c.HMGet(ctx, s.bucketOf(v, 0).Key(), "buckets", "was").Result()
	if err != nil {
		return nil, fmt.Errorf("read buckets of voucher %d: %w", v, err)
	}
	str, _ := raw[0].(string)
	l, err := keyspace.ParseLayout(str)
	if err != nil {
		return nil, fmt.Errorf("voucher %d: %w", v, err)
	}
	was, _ := raw[1].(string)
	var out []bucket
	for _, f := range append(strings.Fields(was), strconv.Itoa(l.N)) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > MaxBuckets {
			return nil, fmt.Errorf("voucher %d: bad was %q", v, was)
		}
		if b := s.userBucketOf(v, user, n); !slices.Contains(out, b) {
			out = append(out, b)
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

// streamPage is how many entries ScanStream reads at a time.
const streamPage = 1000

// ScanStream reads stream key oldest first, streamPage entries at a time,
// handing each page to page until it returns true (stop) or the stream
// ends: the one pager of every full read of a stream.
func (s *Store) ScanStream(ctx context.Context, key string, page func([]redis.XMessage) (stop bool)) error {
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
	parts, err := s.ReadVoucherPartitions(ctx, v)
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

// InFlight reports whether a stream of voucher v (each of its buckets')
// still holds an entry of it: an order admitted but not yet persisted (nor
// dead-lettered). The streams hold only such entries, so after a sale they
// are short.
func (s *Store) InFlight(ctx context.Context, v int64) (bool, error) {
	parts, err := s.ReadVoucherPartitions(ctx, v)
	if err != nil {
		return false, err
	}
	want := formatID(v)
	found := false
	for _, p := range parts {
		err := s.ScanStream(ctx, StreamKey(p), func(msgs []redis.XMessage) bool {
			found = slices.ContainsFunc(msgs, func(m redis.XMessage) bool { id, _ := m.Values["voucher_id"].(string); return id == want })
			return found
		})
		if err != nil || found {
			return found, err
		}
	}
	return false, nil
}
