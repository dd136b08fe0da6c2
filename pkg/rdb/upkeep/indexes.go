package upkeep

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/lua"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/internal/keyspace"
)

// Indexes keeps a Store's users' indexes of admissions (a voucher hash's
// o:USER fields, which admit.lua appends to) to the orders still in the
// streams: the reaper's sweeper while a sale runs, its trimmer once it
// has ended.
type Indexes struct{ s *rdb.Store }

// NewIndexes returns the upkeep of s's users' indexes.
func NewIndexes(s *rdb.Store) *Indexes { return &Indexes{s: s} }

// buckets are voucher v's buckets, the new ones too while it splits.
func (x *Indexes) buckets(ctx context.Context, v int64) ([]keyspace.Bucket, error) {
	l, err := keyspace.ReadLayout(ctx, x.s.Client(), x.s.Partitions(), v)
	if err != nil {
		return nil, err
	}
	return keyspace.Buckets(x.s.Partitions(), v, l), nil
}

// trimChunk is how many users' indexes one pending.lua call of the
// trimmer reads.
const trimChunk = 200

// Trim drops, from every bucket of voucher v whose sale has ended,
// the users' indexes of admissions (o:USER) whose orders have all left the
// stream, and keeps the rest (pending.lua on a few hundred users a call,
// found by HSCAN): after the sale the indexes serve only a listing of
// orders not yet persisted. A bucket found with none left is marked
// trimmed for its end (field ti = end_ms) and not read again unless its
// sale is extended. finished: this call marked the last of them.
func (x *Indexes) Trim(ctx context.Context, v int64, now time.Time) (finished bool, err error) {
	bs, err := x.buckets(ctx, v)
	if err != nil {
		return false, err
	}
	done, markedNow := true, false
	for _, b := range bs {
		h, err := x.s.Client().HMGet(ctx, b.Key(), "end_ms", "ti").Result()
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
		left, _, err := x.trimBucket(ctx, b)
		if err != nil {
			return false, err
		}
		if left {
			done = false
			continue
		}
		marked, err := x.markTrimmed(ctx, b, end)
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
func (x *Indexes) trimBucket(ctx context.Context, b keyspace.Bucket) (left bool, dropped int, err error) {
	var cursor uint64
	for {
		fields, next, err := x.s.Client().HScan(ctx, b.Key(), cursor, keyspace.PendingPrefix+"*", trimChunk).Result()
		if err != nil {
			return false, dropped, fmt.Errorf("scan indexes of %s: %w", b.Key(), err)
		}
		chunk := make([]any, 0, len(fields)/2)
		for i := 0; i < len(fields); i += 2 {
			chunk = append(chunk, strings.TrimPrefix(fields[i], keyspace.PendingPrefix))
		}
		if len(chunk) > 0 {
			still, err := lua.Pending.Run(ctx, x.s.Client(), []string{b.Key(), b.Stream()}, chunk...).Slice()
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

// Sweep does for voucher v while it sells what Trim does
// once its sale has ended: it drops, from each of its buckets, the users'
// indexes of admissions (o:USER) whose orders have all left the stream
// (persisted and acknowledged, or dead-lettered) and, of the others, the
// positions that have (pending.lua, a few hundred users a call, found by
// HSCAN), so that a sale without an end keeps a buyer's count and the
// orders not yet persisted, not a position for every admission it ever
// made. A claim appending to an index between two calls is kept: each
// call reads and writes an index in one script. dropped: the indexes
// dropped whole, all their orders persisted.
func (x *Indexes) Sweep(ctx context.Context, v int64) (dropped int, err error) {
	bs, err := x.buckets(ctx, v)
	if err != nil {
		return 0, err
	}
	for _, b := range bs {
		_, n, err := x.trimBucket(ctx, b)
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
func (x *Indexes) markTrimmed(ctx context.Context, b keyspace.Bucket, end string) (bool, error) {
	marked := false
	err := x.s.Client().Watch(ctx, func(tx *redis.Tx) error {
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
