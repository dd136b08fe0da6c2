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
	"time"

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

// trimChunk is how many users' indexes one pending.lua call of the
// trimmer reads.
const trimChunk = 200

// TrimIndexes drops, from every bucket of voucher v whose sale has ended,
// the users' indexes of admissions (o:USER) whose orders have all left the
// stream, and keeps the rest (pending.lua on a few hundred users a call,
// found by HSCAN): after the sale the indexes serve only a listing of
// orders not yet persisted. A bucket found with none left is marked
// trimmed for its end (field ti = end_ms) and not read again unless its
// sale is extended. finished: this call marked the last of them.
func (s *Store) TrimIndexes(ctx context.Context, v int64, now time.Time) (finished bool, err error) {
	bs, err := s.bucketsOfVoucher(ctx, v)
	if err != nil {
		return false, err
	}
	done, markedNow := true, false
	for _, b := range bs {
		h, err := s.c.HMGet(ctx, b.Key(), "end_ms", "ti").Result()
		if err != nil {
			return false, fmt.Errorf("read end of %s: %w", b.Key(), err)
		}
		end, _ := h[0].(string)
		endMs, _ := strconv.ParseInt(end, 10, 64)
		if end == "" || endMs <= 0 || endMs > now.UnixMilli() { // gone, or no end, or not ended
			done = done && end == ""
			continue
		}
		if ti, _ := h[1].(string); ti == end {
			continue
		}
		left, _, err := s.trimBucket(ctx, b)
		if err != nil {
			return false, err
		}
		if left {
			done = false
			continue
		}
		marked, err := s.markTrimmed(ctx, b, end)
		if err != nil {
			return false, err
		}
		done, markedNow = done && marked, markedNow || marked
	}
	return done && markedNow, nil
}

// trimBucket runs pending.lua over the users whose indexes HSCAN finds in
// bucket b, a chunk at a time; left: some index still names an order in
// the stream; dropped: the indexes dropped whole (all their orders gone
// from the stream).
func (s *Store) trimBucket(ctx context.Context, b bucket) (left bool, dropped int, err error) {
	var cursor uint64
	for {
		fields, next, err := s.c.HScan(ctx, b.Key(), cursor, pendingPrefix+"*", trimChunk).Result()
		if err != nil {
			return false, dropped, fmt.Errorf("scan indexes of %s: %w", b.Key(), err)
		}
		chunk := make([]any, 0, len(fields)/2)
		for i := 0; i < len(fields); i += 2 {
			chunk = append(chunk, strings.TrimPrefix(fields[i], pendingPrefix))
		}
		if len(chunk) > 0 {
			still, err := lua.Pending.Run(ctx, s.c, []string{b.Key(), b.Stream()}, chunk...).Slice()
			if err != nil {
				return false, dropped, fmt.Errorf("trim indexes of %s: %w", b.Key(), err)
			}
			left = left || len(still) > 0
			dropped += len(chunk) - stillUsers(still)
		}
		if cursor = next; cursor == 0 {
			return left, dropped, nil
		}
	}
}

// stillUsers counts the users of pending.lua's orders still in the
// stream ({entry_id, {'voucher_id', V, 'oK', "USER …"}} each).
func stillUsers(still []any) int {
	users := map[string]bool{}
	for _, e := range still {
		pair, _ := e.([]any)
		if len(pair) < 2 {
			continue
		}
		f, _ := pair[1].([]any)
		if len(f) < 4 {
			continue
		}
		v, _ := f[3].(string)
		u, _, _ := strings.Cut(v, " ")
		users[u] = true
	}
	return len(users)
}

// SweepIndexes does for voucher v while it sells what TrimIndexes does
// once its sale has ended: it drops, from each of its buckets, the users'
// indexes of admissions (o:USER) whose orders have all left the stream
// (persisted and acknowledged, or dead-lettered) and, of the others, the
// positions that have (pending.lua, a few hundred users a call, found by
// HSCAN), so that a sale without an end keeps a buyer's count and the
// orders not yet persisted, not a position for every admission it ever
// made. A claim appending to an index between two calls is kept: each
// call reads and writes an index in one script. dropped: the indexes
// dropped whole, all their orders persisted.
func (s *Store) SweepIndexes(ctx context.Context, v int64) (dropped int, err error) {
	bs, err := s.bucketsOfVoucher(ctx, v)
	if err != nil {
		return 0, err
	}
	for _, b := range bs {
		_, n, err := s.trimBucket(ctx, b)
		dropped += n
		if err != nil {
			return dropped, err
		}
	}
	return dropped, nil
}

// markTrimmed marks bucket b trimmed for its end end, if the hash is still
// there and still ends then (WATCH: a hash gone, or its sale extended, is
// left as it is; the HSET never makes a hash without its TTL).
func (s *Store) markTrimmed(ctx context.Context, b bucket, end string) (bool, error) {
	marked := false
	err := s.c.Watch(ctx, func(tx *redis.Tx) error {
		cur, err := tx.HGet(ctx, b.Key(), "end_ms").Result()
		if err != nil || cur != end {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, b.Key(), "ti", end)
			return nil
		})
		marked = err == nil
		return err
	}, b.Key())
	switch {
	case errors.Is(err, redis.Nil), errors.Is(err, redis.TxFailedErr):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("mark %s trimmed: %w", b.Key(), err)
	}
	return marked, nil
}
