package rdb

// A voucher's admission state: its writes (put, create once), its keys'
// expiry, and operators' changes applied once.

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
	"github.com/flashsale/flashsale/pkg/rdb/internal/keyspace"
)

// Voucher is the part of a voucher the admission script needs, and its
// name, which the queue page shows.
type Voucher struct {
	ID                int64
	Name              string // bucket 0 holds it; no script reads it
	Stock             int64  // units left to admit
	PerUserLimit      int64
	PerUserDailyLimit int64     // 0 = none
	StartsAt, EndsAt  time.Time // zero = unbounded
	// ExpireAt is when every key of the voucher expires (see KeysExpireAt);
	// zero: never (a sale without an end).
	ExpireAt time.Time
	// Pooled: admissions take items of the pool (pkg/sale); Items is the
	// pool, in the order it is handed out, and Stock its length.
	Pooled bool
	Items  []order.Item
	// Closed: the pool was closed for good (ClosePool).
	Closed bool
	// Paused: claims are refused (409 paused) until it is resumed.
	Paused bool
	// Buckets: the stock is spread over this many buckets (0 or 1: one;
	// see keys.go). Only a count of units may have more than one.
	Buckets int
	// Draw: a draw sale (pkg/draw): admissions are entries, one per user,
	// and take no stock.
	Draw bool
	// ProofOfWork: the difficulty of the voucher's proof-of-work gate (the
	// least max number a claim's proof must have); 0: no gate.
	ProofOfWork int64
	// Room: the voucher's waiting room (pkg/room's Config.Encode form,
	// "N:PRE_MS:PASS_MS"); "" or "0": none.
	Room string
	// Access: claims and room joins need an access code (pkg/access): 0
	// never, -1 for the whole sale, else until this unix millisecond.
	Access int64
}

// KeysOutliveSale is how long a voucher's keys outlive the end of its sale
// and its payment window: long enough for the last cancellations to be
// released and for reconcile (which looks back as far) to compare.
const KeysOutliveSale = DayKeyTTL

// KeysExpireAt is when the keys of a voucher whose sale ends at endsAt,
// with payment window paymentTimeout, may go: zero when it never ends.
// Redis then does not grow with every sale ever run.
func KeysExpireAt(endsAt time.Time, paymentTimeout time.Duration) time.Time {
	if endsAt.IsZero() {
		return time.Time{}
	}
	return endsAt.Add(paymentTimeout + KeysOutliveSale).Truncate(time.Second)
}

// PutVoucher writes (warms) a voucher's admission state.
func (s *Store) PutVoucher(ctx context.Context, v Voucher) error {
	if err := v.checkBuckets(); err != nil {
		return err
	}
	err := s.eachBucketTx(ctx, v, func(pipe redis.Pipeliner, b bucket) {
		s.putVoucherHash(ctx, pipe, b, v)
	})
	if err != nil {
		return err
	}
	return s.WaitWritten(ctx, s.VoucherPartitions(v.ID, max(v.Buckets, 1))...)
}

// eachBucketTx runs fill for each of v's buckets in a transaction of its
// own (a cluster runs none across slots), bucket 0 last: a voucher exists
// for a gateway once bucket 0 does, and its other buckets exist then.
func (s *Store) eachBucketTx(ctx context.Context, v Voucher, fill func(pipe redis.Pipeliner, b bucket)) error {
	for n := max(v.Buckets, 1) - 1; n >= 0; n-- {
		_, err := s.c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			fill(pipe, s.bucketOf(v.ID, n))
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("write voucher %d bucket %d: %w", v.ID, n, err)
		}
	}
	return nil
}

func (v Voucher) checkBuckets() error {
	if v.Buckets < 0 || v.Buckets > MaxBuckets {
		return fmt.Errorf("voucher %d: %d buckets (1..%d)", v.ID, v.Buckets, MaxBuckets)
	}
	return nil
}

// putVoucherHash writes bucket b of v: its hash with its share of v.Stock
// and a pool; the moves from it are forgotten (v.Stock is all there is).
func (s *Store) putVoucherHash(ctx context.Context, pipe redis.Pipeliner, b bucket, v Voucher) {
	n := max(v.Buckets, 1)
	bv := v
	bv.Stock = share(v.Stock, n, b.N)
	putBucketHash(ctx, pipe, b, bv)
	if n > 1 {
		pipe.Del(ctx, b.MovesOut())
	}
}

// putBucketHash writes bucket b's voucher hash and its expiry, and a
// pooled voucher's pool. The users hash and the released set take the same
// expiry from the hash's expire_s when the scripts create them.
func putBucketHash(ctx context.Context, pipe redis.Pipeliner, b bucket, v Voucher) {
	key := b.Key()
	pipe.HSet(ctx, key, "stock", v.Stock, "limit", v.PerUserLimit, "daily", v.PerUserDailyLimit,
		"start_ms", unixMs(v.StartsAt), "end_ms", unixMs(v.EndsAt), "expire_s", unixS(v.ExpireAt),
		"pool", bit(v.Pooled), "closed", bit(v.Closed), "paused", bit(v.Paused), "buckets", max(v.Buckets, 1), "draw", bit(v.Draw),
		"pow", v.ProofOfWork, "access", v.Access)
	if b.N == 0 && v.Name != "" {
		pipe.HSet(ctx, key, "name", v.Name)
	}
	rate, pre, pass, ok := roomFields(v.Room)
	if ok {
		pipe.HSet(ctx, key, "room", rate, "room_pre_ms", pre, "room_pass_ms", pass)
	} else {
		pipe.HSet(ctx, key, "room", 0)
	}
	if b.N == 0 { // in the voucher's slot: the same transaction
		pipe.HSet(ctx, RoomsKey(b.P), strconv.FormatInt(b.V, 10), bit(ok && rate != "0"))
		pipe.HIncrBy(ctx, RoomsKey(b.P), RoomsVersion, 1)
	}
	expire(ctx, pipe, key, v.ExpireAt)
	if !v.Pooled {
		return
	}
	pk := b.Pool()
	pipe.Del(ctx, pk)
	for i := 0; i < len(v.Items); i += 1000 {
		chunk := v.Items[i:min(i+1000, len(v.Items))]
		items := make([]any, len(chunk))
		for j, it := range chunk {
			items[j] = it.Encode()
		}
		pipe.RPush(ctx, pk, items...)
	}
	if len(v.Items) > 0 {
		expire(ctx, pipe, pk, v.ExpireAt)
	}
}

func bit(b bool) int {
	if b {
		return 1
	}
	return 0
}

// expire makes key go at at, or never when at is zero.
func expire(ctx context.Context, pipe redis.Pipeliner, key string, at time.Time) {
	if at.IsZero() {
		pipe.Persist(ctx, key)
	} else {
		pipe.ExpireAt(ctx, key, at)
	}
}

func unixS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// roomFields splits a room's settings "N:PRE_MS:PASS_MS" into the
// voucher hash's fields room, room_pre_ms and room_pass_ms.
func roomFields(room string) (rate, pre, pass string, ok bool) {
	parts := strings.Split(room, ":")
	if len(parts) != 3 {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// ProofOfWork reads voucher v's proof-of-work difficulty (0: no gate, or
// no such voucher in Redis).
func (s *Store) ProofOfWork(ctx context.Context, v int64) (int64, error) {
	n, err := s.c.HGet(ctx, s.bucketOf(v, 0).Key(), "pow").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

// Change is an operator's change of a voucher on sale, as MySQL recorded it.
type Change struct {
	ID        int64
	VoucherID int64
	AddStock  int64
	EndsAt    time.Time // zero: unchanged
	ExpireAt  time.Time // the keys' new expiry, with EndsAt
	Paused    *bool     // nil: unchanged
	Pow       *int64    // the gate's new difficulty (0: off); nil: unchanged
	Room      *string   // the waiting room's new settings ("0": off); nil: unchanged
	Access    *int64    // the access codes' new setting (Voucher.Access); nil: unchanged
}

// ApplyChange applies c to Redis exactly once (change.lua) in each of the
// voucher's buckets: the new end and the pause to all, the added stock to
// bucket 0 (a dry bucket takes its share from there, buckets.go). applied
// reports whether this call applied it anywhere; a call after a crash half
// way applies it where it is missing. found is false when Redis holds no
// bucket of the voucher: nothing was written.
func (s *Store) ApplyChange(ctx context.Context, c Change) (applied, found bool, err error) {
	l, err := s.layoutOf(ctx, c.VoucherID)
	if err != nil {
		return false, false, err
	}
	// While it splits, the old buckets: the new ones take bucket 0's
	// settings and changes applied before they open (pkg/rdb/split).
	buckets := s.bucketsIn(c.VoucherID, keyspace.Layout{N: l.N})
	paused, pow := -1, int64(-1)
	if c.Paused != nil {
		paused = bit(*c.Paused)
	}
	if c.Pow != nil {
		pow = *c.Pow
	}
	room, access := "", ""
	if c.Room != nil {
		room = *c.Room
	}
	if c.Access != nil {
		access = strconv.FormatInt(*c.Access, 10)
	}
	for _, b := range buckets {
		add := c.AddStock
		if b.N > 0 {
			add = 0
		}
		index := "" // the rooms' index is bucket 0's to write
		if b.N == 0 {
			index = strconv.FormatInt(b.V, 10)
		}
		keys := []string{b.Key(), b.Changes(), b.Released(), b.Pool(), RoomsKey(b.P)}
		n, err := lua.Change.Run(ctx, s.c, keys, c.ID, add, unixMs(c.EndsAt), unixS(c.ExpireAt), paused, pow, room, access, index).Int64()
		if err != nil {
			return applied, found, fmt.Errorf("apply change %d of voucher %d: %w", c.ID, c.VoucherID, err)
		}
		if n == -2 {
			return applied, true, fmt.Errorf("apply change %d of voucher %d: %w", c.ID, c.VoucherID, ErrSplitting)
		}
		applied = applied || n == 1
		found = found || n >= 0
	}
	if !found {
		return false, false, nil
	}
	return applied, true, s.WaitWritten(ctx, partitionsOf(buckets)...)
}

// CreateVoucher puts v in Redis unless Redis holds it already: each
// bucket is written once (eachAbsentBucketTx: a second writer, or a bucket
// written before a crash, is left as it is), so that claims admitted
// meanwhile are never undone. changes are the voucher's changes v already
// reflects (MySQL's, read with v): they go in every bucket's set of
// changes applied, so change.lua never applies them again. created
// reports whether bucket 0 was written now.
func (s *Store) CreateVoucher(ctx context.Context, v Voucher, changes []int64) (created bool, err error) {
	if err := v.checkBuckets(); err != nil {
		return false, err
	}
	n := max(v.Buckets, 1)
	created, err = s.eachAbsentBucketTx(ctx, v, func(pipe redis.Pipeliner, b bucket) {
		s.putVoucherHash(ctx, pipe, b, v)
		if len(changes) > 0 {
			members := make([]any, len(changes))
			for i, id := range changes {
				members[i] = id
			}
			pipe.SAdd(ctx, b.Changes(), members...)
			expire(ctx, pipe, b.Changes(), v.ExpireAt)
		}
	})
	if err != nil {
		return false, fmt.Errorf("create voucher %d: %w", v.ID, err)
	}
	s.buckets.Store(v.ID, n)
	return created, s.WaitWritten(ctx, s.VoucherPartitions(v.ID, n)...)
}

// eachAbsentBucketTx runs fill for each of v's buckets that Redis does not
// hold, bucket 0 last, in a transaction under WATCH of the bucket's hash: a
// bucket that exists, or that another writer writes first, is left as it
// is. A bucket that exists may be admitting claims, and a write would undo
// them; one that does not admits none. It reports whether bucket 0 was
// written now.
func (s *Store) eachAbsentBucketTx(ctx context.Context, v Voucher, fill func(pipe redis.Pipeliner, b bucket)) (zero bool, err error) {
	for k := max(v.Buckets, 1) - 1; k >= 0; k-- {
		b := s.bucketOf(v.ID, k)
		err := s.c.Watch(ctx, func(tx *redis.Tx) error {
			exists, err := tx.Exists(ctx, b.Key()).Result()
			if err != nil || exists == 1 {
				return err
			}
			_, err = tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				fill(pipe, b)
				return nil
			})
			if err == nil && k == 0 {
				zero = true
			}
			return err
		}, b.Key())
		if errors.Is(err, redis.TxFailedErr) {
			continue // another writer wrote it first: it exists
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			return false, fmt.Errorf("bucket %d: %w", k, err)
		}
	}
	return zero, nil
}

// VoucherFace is what a buyer's page shows of voucher v before anything
// else: its name, and when its waiting room opens (unix ms: the sale's
// start less the room's pre-queue; 0 without a room or a start), as its
// hash holds them (zero values when the voucher is not in Redis).
type VoucherFace struct {
	Name    string
	OpensMs int64
}

// Face reads voucher v's VoucherFace, one HMGET.
func (s *Store) Face(ctx context.Context, v int64) (VoucherFace, error) {
	vals, err := s.c.HMGet(ctx, s.VoucherKey(v), "name", "start_ms", "room", "room_pre_ms").Result()
	if err != nil {
		return VoucherFace{}, err
	}
	str := func(i int) string { s, _ := vals[i].(string); return s }
	num := func(i int) int64 { n, _ := strconv.ParseInt(str(i), 10, 64); return n }
	f := VoucherFace{Name: str(0)}
	if start, rate := num(1), num(2); start > 0 && rate > 0 {
		f.OpensMs = start - num(3)
	}
	return f, nil
}
