package rdb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb/internal/keyspace"
)

// VoucherState is a voucher's admission state as Redis holds it, summed
// over its buckets: the stock (with the units being moved between buckets)
// and the counts of every user (each user's counts are in one bucket).
type VoucherState struct {
	Found   bool
	Voucher Voucher
	Users   map[string]int64
	Days    map[string]map[string]int64 // day -> user -> count, for the days asked
}

// ReadVoucherState reads voucher v's state, with the per-day counts of days.
func (s *Store) ReadVoucherState(ctx context.Context, v int64, days []string) (VoucherState, error) {
	st := VoucherState{Users: map[string]int64{}, Days: map[string]map[string]int64{}}
	l, err := s.layoutOf(ctx, v)
	if err != nil || l.To > 0 {
		return st, cmp.Or(err, fmt.Errorf("read voucher %d: %w", v, ErrSplitting))
	}
	buckets := s.bucketsIn(v, l)
	b0 := buckets[0]
	h, err := s.c.HGetAll(ctx, b0.Key()).Result()
	if err != nil {
		return st, fmt.Errorf("read voucher %d: %w", v, err)
	}
	if len(h) > 0 {
		st.Found = true
		num := func(k string) int64 { n, _ := strconv.ParseInt(h[k], 10, 64); return n }
		st.Voucher = Voucher{ID: v, PerUserLimit: num("limit"), PerUserDailyLimit: num("daily"), Buckets: len(buckets)}
		if ms := num("start_ms"); ms > 0 {
			st.Voucher.StartsAt = time.UnixMilli(ms).UTC()
		}
		if ms := num("end_ms"); ms > 0 {
			st.Voucher.EndsAt = time.UnixMilli(ms).UTC()
		}
		if sec := num("expire_s"); sec > 0 {
			st.Voucher.ExpireAt = time.Unix(sec, 0).UTC()
		}
		st.Voucher.Pooled, st.Voucher.Closed, st.Voucher.Paused = num("pool") == 1, num("closed") == 1, num("paused") == 1
		st.Voucher.Draw, st.Voucher.ProofOfWork, st.Voucher.Access = num("draw") == 1, num("pow"), num("access")
		if num("room") > 0 {
			st.Voucher.Room = h["room"] + ":" + h["room_pre_ms"] + ":" + h["room_pass_ms"]
		}
	}
	stocks, err := s.readStocks(ctx, v, len(buckets))
	if err != nil {
		return st, err
	}
	st.Voucher.Stock = stocks.total()
	if st.Voucher.Pooled {
		raw, err := s.c.LRange(ctx, b0.Pool(), 0, -1).Result()
		if err != nil {
			return st, fmt.Errorf("read pool of voucher %d: %w", v, err)
		}
		st.Voucher.Items = make([]order.Item, 0, len(raw))
		for _, r := range raw {
			it, err := order.ParseItem(r)
			if err != nil {
				return st, fmt.Errorf("pool of voucher %d: %w", v, err)
			}
			st.Voucher.Items = append(st.Voucher.Items, it)
		}
	}
	for _, b := range buckets {
		if b.N > 0 {
			if h, err = s.c.HGetAll(ctx, b.Key()).Result(); err != nil {
				return st, fmt.Errorf("read voucher %d bucket %d: %w", v, b.N, err)
			}
		}
		// The users' counts are the voucher hash's u:USER fields.
		for f, val := range h {
			u, ok := strings.CutPrefix(f, keyspace.UserPrefix)
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				return st, fmt.Errorf("voucher %d field %s: %w", v, f, err)
			}
			if n != 0 {
				st.Users[u] += n
			}
		}
		for _, d := range days {
			counts, err := s.intHash(ctx, b.Day(d))
			if err != nil {
				return st, err
			}
			if st.Days[d] == nil {
				st.Days[d] = map[string]int64{}
			}
			for u, n := range counts {
				st.Days[d][u] += n
			}
		}
	}
	return st, nil
}

func (s *Store) intHash(ctx context.Context, key string) (map[string]int64, error) {
	h, err := s.c.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("hgetall %s: %w", key, err)
	}
	out := make(map[string]int64, len(h))
	for k, v := range h {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s field %s: %w", key, k, err)
		}
		if n != 0 {
			out[k] = n
		}
	}
	return out, nil
}

// StreamOrders returns every order of partition p's stream, oldest first.
func (s *Store) StreamOrders(ctx context.Context, p int) ([]StreamOrder, error) {
	var out []StreamOrder
	err := s.ScanStream(ctx, StreamKey(p), func(msgs []redis.XMessage) bool {
		for _, m := range msgs {
			out = append(out, ParseEntries(p, m)...)
		}
		return false
	})
	return out, err
}

// RewriteVoucher replaces voucher v's admission state with st in one
// transaction per bucket (MULTI/EXEC; a cluster runs none across slots): each bucket's hash with its share of
// the stock (and a pool), the per-user counts and the per-day counts of
// the days in st, each in its user's bucket; it adds released to every
// bucket's set of released orders and changes to every bucket's set of
// changes applied (st is the truth, every change included: none may be
// applied again), and forgets the moves between buckets. Claims admitted
// meanwhile are undone: its caller has paused the sale.
func (s *Store) RewriteVoucher(ctx context.Context, st VoucherState, released, changes []int64) error {
	_, err := s.rewriteVoucher(ctx, st, released, changes, false)
	return err
}

// RestoreVoucher writes st as RewriteVoucher does, but only the buckets
// of v Redis does not hold (eachAbsentBucketTx): a bucket that exists, or
// that a gateway creates while st was read, may be admitting claims that
// st does not count. It reports whether it wrote bucket 0.
func (s *Store) RestoreVoucher(ctx context.Context, st VoucherState, released, changes []int64) (bool, error) {
	return s.rewriteVoucher(ctx, st, released, changes, true)
}

func (s *Store) rewriteVoucher(ctx context.Context, st VoucherState, released, changes []int64, absentOnly bool) (bool, error) {
	if err := st.Voucher.checkBuckets(); err != nil {
		return false, err
	}
	v := st.Voucher.ID
	n := max(st.Voucher.Buckets, 1)
	l, err := s.layoutOf(ctx, v)
	have := l.N
	switch {
	case err != nil:
		return false, err
	case l.To > 0:
		return false, fmt.Errorf("rewrite voucher %d: %w", v, ErrSplitting)
	case have != n && have != 1:
		return false, fmt.Errorf("rewrite voucher %d: Redis has %d buckets, MySQL %d", v, have, n)
	}
	// Each user's counts go to that user's bucket.
	users := make([]map[string]int64, n)
	days := make([]map[string]map[string]int64, n)
	for b := range n {
		users[b], days[b] = map[string]int64{}, map[string]map[string]int64{}
		for d := range st.Days {
			days[b][d] = map[string]int64{}
		}
	}
	for u, c := range st.Users {
		users[UserBucket(u, n)][u] = c
	}
	// The users' indexes of pending orders (o:USER) are Redis's alone:
	// kept across the rewrite, each in the bucket whose stream holds its
	// orders; bucket 0's was lists the counts of buckets to read them at
	// (a split's, and have's when the rewrite spreads the voucher).
	pending, was, err := s.pendingIndexes(ctx, v, have, n)
	if err != nil {
		return false, err
	}
	if have != n {
		was = strings.TrimSpace(was + " " + strconv.Itoa(have))
	}
	for d, counts := range st.Days {
		for u, c := range counts {
			days[UserBucket(u, n)][d][u] = c
		}
	}
	rewritten := time.Now().UnixMilli()
	fill := func(pipe redis.Pipeliner, bk bucket) {
		// The hash is written anew: its users' counts are fields of it.
		pipe.Del(ctx, bk.Key())
		s.putVoucherHash(ctx, pipe, bk, st.Voucher)
		// st counts every release MySQL recorded, and released holds those
		// it still owes: a caller that knew one owed before now reads
		// MySQL again (release.lua's cutoff), as after forget.lua.
		pipe.HSet(ctx, bk.Key(), "rf", rewritten)
		b := bk.N
		if b == 0 && was != "" {
			pipe.HSet(ctx, bk.Key(), "was", was)
		}
		expire := func(key string) { expire(ctx, pipe, key, st.Voucher.ExpireAt) }
		counts := make(map[string]int64, len(users[b]))
		for u, c := range users[b] {
			counts[userField(u)] = c
		}
		for chunk := range chunks(counts, 1000) {
			pipe.HSet(ctx, bk.Key(), chunk...)
		}
		for chunk := range chunks(pending[b], 1000) {
			pipe.HSet(ctx, bk.Key(), chunk...)
		}
		for d, counts := range days[b] {
			pipe.Del(ctx, bk.Day(d))
			if len(counts) > 0 {
				pipe.HSet(ctx, bk.Day(d), flatten(counts)...)
				pipe.Expire(ctx, bk.Day(d), DayKeyTTL)
			}
		}
		// Orders released and changes applied: none may be again.
		for key, ids := range map[string][]int64{bk.Released(): released, bk.Changes(): changes} {
			for i := 0; i < len(ids); i += 1000 {
				chunk := ids[i:min(i+1000, len(ids))]
				members := make([]any, len(chunk))
				for j, id := range chunk {
					members[j] = id
				}
				pipe.SAdd(ctx, key, members...)
			}
			if len(ids) > 0 {
				expire(key)
			}
		}
	}
	zero := true
	switch {
	case absentOnly:
		zero, err = s.eachAbsentBucketTx(ctx, st.Voucher, fill)
	case st.Voucher.Pooled && !st.Voucher.Closed && n == 1:
		err = s.rewriteOpenPool(ctx, &st.Voucher, fill)
	default:
		err = s.eachBucketTx(ctx, st.Voucher, fill)
	}
	if err != nil {
		return false, fmt.Errorf("rewrite voucher %d: %w", v, err)
	}
	s.buckets.Store(v, n)
	return zero, nil
}

// pendingIndexes reads the o:USER fields of voucher v's have buckets,
// each filed under the bucket it is in (of n), and bucket 0's was.
func (s *Store) pendingIndexes(ctx context.Context, v int64, have, n int) (out []map[string]string, was string, err error) {
	out = make([]map[string]string, n)
	for b := range n {
		out[b] = map[string]string{}
	}
	for b := range have {
		h, err := s.c.HGetAll(ctx, s.bucketOf(v, b).Key()).Result()
		if err != nil {
			return nil, "", fmt.Errorf("read voucher %d bucket %d: %w", v, b, err)
		}
		for f, ids := range h {
			if strings.HasPrefix(f, keyspace.PendingPrefix) {
				out[b][f] = ids // where its positions' stream is (b < have <= n)
			}
		}
		if b == 0 {
			was = h["was"]
		}
	}
	return out, was, nil
}

// rewriteOpenPool writes pooled voucher v's one bucket as eachBucketTx
// does, but never reopens a pool Redis has closed (ClosePool: for good).
// The refunder closes Redis before MySQL records the refund, so a repair
// that read MySQL and its clock before the sale's end can come after the
// close: it then writes the pool closed, as the refund will have it
// (WATCH: a close between the read and the write runs the write again).
func (s *Store) rewriteOpenPool(ctx context.Context, v *Voucher, fill func(redis.Pipeliner, bucket)) error {
	b := s.bucketOf(v.ID, 0)
	for range 10 {
		err := s.c.Watch(ctx, func(tx *redis.Tx) error {
			closed, err := tx.HGet(ctx, b.Key(), "closed").Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			if closed == "1" {
				v.Closed, v.Stock, v.Items = true, 0, nil
			}
			_, err = tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				fill(pipe, b)
				return nil
			})
			return err
		}, b.Key())
		switch {
		case errors.Is(err, redis.TxFailedErr):
			continue // written meanwhile: read it again
		case err != nil && !errors.Is(err, redis.Nil):
			return err
		}
		return nil
	}
	return fmt.Errorf("voucher %d: its hash changed under ten writes in a row", v.ID)
}

// chunks yields m's fields and values, flattened, size fields at a time.
func chunks[V any](m map[string]V, size int) func(yield func([]any) bool) {
	return func(yield func([]any) bool) {
		out := make([]any, 0, 2*min(size, len(m)))
		for k, v := range m {
			out = append(out, k, v)
			if len(out) == 2*size {
				if !yield(out) {
					return
				}
				out = make([]any, 0, 2*size)
			}
		}
		if len(out) > 0 {
			yield(out)
		}
	}
}

func flatten(m map[string]int64) []any {
	out := make([]any, 0, 2*len(m))
	for k, v := range m {
		out = append(out, k, v)
	}
	return out
}

// Unloaded lists the partitions whose LoadedKey is missing: Redis lost
// its data since the reaper last found every voucher on sale there, or
// was never loaded.
func (s *Store) Unloaded(ctx context.Context) ([]int, error) {
	pipe := s.c.Pipeline()
	cmds := make([]*redis.IntCmd, s.partitions)
	for p := range s.partitions {
		cmds[p] = pipe.Exists(ctx, s.loaded[p])
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("read the partitions' loaded marks: %w", err)
	}
	var out []int
	for p, c := range cmds {
		if c.Val() == 0 {
			out = append(out, p)
		}
	}
	return out, nil
}

// MarkLoaded marks partitions as holding every voucher MySQL has on sale
// in them (the reaper's restorer, after checking; reconcile's repair).
func (s *Store) MarkLoaded(ctx context.Context, partitions ...int) error {
	pipe := s.c.Pipeline()
	for _, p := range partitions {
		pipe.Set(ctx, s.loaded[p], "1", 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("mark partitions loaded: %w", err)
	}
	return nil
}

// MarkAllLoaded marks every partition loaded, and its rooms' index
// complete (after a full rebuild, which wrote every voucher and so indexed
// it, or, in tests, a fresh Redis, as the restorer's first pass over one
// does).
func (s *Store) MarkAllLoaded(ctx context.Context) error {
	all := s.AllPartitions()
	if err := s.MarkLoaded(ctx, all...); err != nil {
		return err
	}
	return s.IndexRooms(ctx, all, nil)
}

// AllPartitions lists every partition.
func (s *Store) AllPartitions() []int {
	all := make([]int, s.partitions)
	for p := range all {
		all[p] = p
	}
	return all
}

// PresentBuckets counts the buckets of voucher v (which has buckets
// buckets) that Redis holds, and says whether bucket 0, the voucher's
// own, is one: a creation or a rebuild writes it last.
func (s *Store) PresentBuckets(ctx context.Context, v int64, buckets int) (n int, zero bool, err error) {
	pipe := s.c.Pipeline()
	var cmds []*redis.IntCmd
	for b := range max(buckets, 1) {
		cmds = append(cmds, pipe.Exists(ctx, s.bucketOf(v, b).Key()))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, false, fmt.Errorf("voucher %d in redis: %w", v, err)
	}
	for _, c := range cmds {
		n += int(c.Val())
	}
	return n, cmds[0].Val() == 1, nil
}
