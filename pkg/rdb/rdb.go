// Package rdb owns flashsale's Redis state: every key, every script call and
// every stream command goes through a Store.
package rdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/lua"
	"github.com/flashsale/flashsale/pkg/order"
)

// Admission rejections, one per code of admit.lua.
var (
	ErrVoucherNotFound = errors.New("voucher not found")
	ErrNotStarted      = errors.New("sale not started")
	ErrEnded           = errors.New("sale ended")
	ErrSoldOut         = errors.New("sold out")
	ErrUserLimit       = errors.New("user limit reached")
	ErrDailyLimit      = errors.New("daily limit reached")
	// ErrOverloaded: the partition took more than order.MaxSeq orders in one
	// millisecond; nothing was changed and the claim may be retried.
	ErrOverloaded = errors.New("partition overloaded")
	// ErrQuantityAboveLimit: the claim asks for more units than the
	// voucher's per-user limit; it can never be admitted.
	ErrQuantityAboveLimit = errors.New("quantity above the per-user limit")
	// ErrPaused: an operator paused the sale.
	ErrPaused = errors.New("sale paused")
)

var admitErrors = map[int64]error{
	1: ErrVoucherNotFound, 2: ErrNotStarted, 3: ErrEnded, 4: ErrSoldOut,
	5: ErrUserLimit, 6: ErrDailyLimit, 7: ErrOverloaded, 8: ErrQuantityAboveLimit, 9: ErrPaused,
}

// DayKeyTTL is how long a per-day counter outlives its day.
const DayKeyTTL = 48 * time.Hour

// DefaultGroup is the consumer group the workers form.
const DefaultGroup = "flashsale-workers"

// Store is flashsale's Redis state.
type Store struct {
	c          redis.UniversalClient
	partitions int
	group      string
}

// New returns a Store over client with the given number of stream partitions
// (1..order.MaxPartitions) and consumer group ("" = DefaultGroup).
func New(client redis.UniversalClient, partitions int, group string) (*Store, error) {
	if partitions < 1 || partitions > order.MaxPartitions {
		return nil, fmt.Errorf("stream partitions must be 1..%d, got %d", order.MaxPartitions, partitions)
	}
	if group == "" {
		group = DefaultGroup
	}
	return &Store{c: client, partitions: partitions, group: group}, nil
}

// Partitions is the number of stream partitions.
func (s *Store) Partitions() int { return s.partitions }

// Group is the consumer group name.
func (s *Store) Group() string { return s.group }

// Client is the underlying client, for tests and readiness checks.
func (s *Store) Client() redis.UniversalClient { return s.c }

// PartitionOf is the partition holding voucher v.
func (s *Store) PartitionOf(v int64) int { return int(uint64(v) % uint64(s.partitions)) }

// Load loads every script, so a broken script fails at start-up and
// pipelined EVALSHA calls find them.
func (s *Store) Load(ctx context.Context) error {
	for _, sc := range lua.All {
		if err := sc.Load(ctx, s.c).Err(); err != nil {
			return fmt.Errorf("load script: %w", err)
		}
	}
	return nil
}

// Voucher is the part of a voucher the admission script needs.
type Voucher struct {
	ID                int64
	Stock             int64 // units left to admit
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
	p := s.PartitionOf(v.ID)
	_, err := s.c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		putVoucherHash(ctx, pipe, p, v)
		return nil
	})
	return err
}

// putVoucherHash writes the voucher hash and its expiry, and a pooled
// voucher's pool. The users hash and the released set take the same expiry
// from the hash's expire_s when the scripts create them.
func putVoucherHash(ctx context.Context, pipe redis.Pipeliner, p int, v Voucher) {
	key := voucherKey(p, v.ID)
	pipe.HSet(ctx, key, "stock", v.Stock, "limit", v.PerUserLimit, "daily", v.PerUserDailyLimit,
		"start_ms", unixMs(v.StartsAt), "end_ms", unixMs(v.EndsAt), "expire_s", unixS(v.ExpireAt),
		"pool", bit(v.Pooled), "closed", bit(v.Closed), "paused", bit(v.Paused))
	expire(ctx, pipe, key, v.ExpireAt)
	if !v.Pooled {
		return
	}
	pk := poolKey(p, v.ID)
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

// RemainingStock returns the units Redis will still admit for voucher v;
// found is false when Redis does not know the voucher.
func (s *Store) RemainingStock(ctx context.Context, v int64) (n int64, found bool, err error) {
	n, err = s.c.HGet(ctx, voucherKey(s.PartitionOf(v), v), "stock").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	return n, err == nil, err
}

// UserCount returns how many orders of voucher v Redis counts for user.
func (s *Store) UserCount(ctx context.Context, v int64, user string) (int64, error) {
	n, err := s.c.HGet(ctx, usersKey(s.PartitionOf(v), v), user).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

// Claim is one user's request for one unit of a voucher.
type Claim struct {
	VoucherID int64
	UserID    string
	// IdempotencyKey, when set, makes a repeated claim return the first
	// admission instead of taking another unit.
	IdempotencyKey string
	IdempotencyTTL time.Duration
	Now            time.Time
	// Day is order.Day(Now, sale time zone): the unit of the daily limit.
	Day string
	// Quantity is the units claimed, all or nothing (0 means 1).
	Quantity int64
}

// Admission is an admitted claim.
type Admission struct {
	OrderID int64
	// Replayed: an earlier admission under the same idempotency key.
	Replayed bool
	// Item is what the order took of a pooled voucher (zero for units).
	Item order.Item
}

// Admit runs the admission script for c. Rejections are the Err* sentinels.
func (s *Store) Admit(ctx context.Context, c Claim) (Admission, error) {
	keys, args := s.admitArgs(c)
	res, err := lua.Admit.Run(ctx, s.c, keys, args...).Slice()
	if err != nil {
		return Admission{}, fmt.Errorf("admit: %w", err)
	}
	return admission(res, s.PartitionOf(c.VoucherID))
}

// AdmitMany runs the admission script for every claim in one pipelined
// round trip (EVALSHA each; a script Redis lost, after a restart, is loaded
// again and those claims run once more: NOSCRIPT means they did not run).
// Results and errors align with claims; the error return is the round
// trip's own.
func (s *Store) AdmitMany(ctx context.Context, claims []Claim) ([]Admission, []error, error) {
	out, errs := make([]Admission, len(claims)), make([]error, len(claims))
	pending := make([]int, len(claims))
	for i := range claims {
		pending[i] = i
	}
	for round := 0; round < 2 && len(pending) > 0; round++ {
		pipe := s.c.Pipeline()
		cmds := make([]*redis.Cmd, len(pending))
		for j, i := range pending {
			keys, args := s.admitArgs(claims[i])
			cmds[j] = lua.Admit.EvalSha(ctx, pipe, keys, args...)
		}
		_, err := pipe.Exec(ctx)
		if err != nil && !isReplyError(cmds) {
			return out, errs, fmt.Errorf("admit pipeline: %w", err)
		}
		var again []int
		for j, i := range pending {
			res, err := cmds[j].Slice()
			switch {
			case err != nil && redis.HasErrorPrefix(err, "NOSCRIPT"):
				again = append(again, i)
			case err != nil:
				errs[i] = fmt.Errorf("admit: %w", err)
			default:
				out[i], errs[i] = admission(res, s.PartitionOf(claims[i].VoucherID))
			}
		}
		if len(again) > 0 {
			if err := lua.Admit.Load(ctx, s.c).Err(); err != nil {
				return out, errs, fmt.Errorf("reload admit script: %w", err)
			}
		}
		pending = again
	}
	return out, errs, nil
}

// isReplyError reports whether a pipeline failed only because some command
// got an error reply (each command then holds its own error).
func isReplyError(cmds []*redis.Cmd) bool {
	for _, c := range cmds {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			var re redis.Error
			if !errors.As(err, &re) {
				return false
			}
		}
	}
	return true
}

func (s *Store) admitArgs(c Claim) ([]string, []any) {
	p := s.PartitionOf(c.VoucherID)
	idem, ttl := voucherKey(p, c.VoucherID)+":idem:-", int64(0)
	if c.IdempotencyKey != "" {
		idem = idemKey(p, c.VoucherID, c.UserID, c.IdempotencyKey)
		ttl = int64(c.IdempotencyTTL / time.Second)
		if ttl < 1 {
			ttl = 1
		}
	}
	keys := []string{voucherKey(p, c.VoucherID), usersKey(p, c.VoucherID), dayKey(p, c.VoucherID, c.Day), idem, StreamKey(p), poolKey(p, c.VoucherID)}
	return keys, []any{c.UserID, c.Now.UnixMilli(), c.Day, ttl, int64(DayKeyTTL / time.Second), c.VoucherID, max(c.Quantity, 1)}
}

// admission reads admit.lua's reply.
func admission(res []any, p int) (Admission, error) {
	code, ok := res[0].(int64)
	if !ok {
		return Admission{}, fmt.Errorf("admit: unexpected reply %v", res)
	}
	if code != 0 {
		if e, known := admitErrors[code]; known {
			return Admission{}, e
		}
		return Admission{}, fmt.Errorf("admit: unknown code %d", code)
	}
	if len(res) != 4 {
		return Admission{}, fmt.Errorf("admit: unexpected reply %v", res)
	}
	entry, _ := res[1].(string)
	id, err := order.IDFromEntry(entry, p)
	if err != nil {
		return Admission{}, fmt.Errorf("admit: %w", err)
	}
	raw, _ := res[3].(string)
	item, err := order.ParseItem(raw)
	if err != nil {
		return Admission{}, fmt.Errorf("admit: %w", err)
	}
	return Admission{OrderID: id, Replayed: res[2] == int64(1), Item: item}, nil
}

// Release gives back o's reservation (stock, the user's total and daily
// counts, and o.Item to the pool) exactly once; released reports whether
// this call did it.
func (s *Store) Release(ctx context.Context, o order.Order) (released bool, err error) {
	p := s.PartitionOf(o.VoucherID)
	keys := []string{voucherKey(p, o.VoucherID), usersKey(p, o.VoucherID), dayKey(p, o.VoucherID, o.Day), releasedKey(p, o.VoucherID), poolKey(p, o.VoucherID)}
	n, err := lua.Release.Run(ctx, s.c, keys, o.ID, o.UserID, o.Units(), o.Item.Encode()).Int64()
	if err != nil {
		return false, fmt.Errorf("release order %d: %w", o.ID, err)
	}
	return n == 1, nil
}

func formatID(id int64) string { return strconv.FormatInt(id, 10) }

// ClosePool ends what Redis will hand out of pooled voucher v, for good:
// its pool is emptied, its stock set to zero and the hash marked closed,
// so neither an admission (whatever a gateway's clock says) nor a release
// (release.lua) changes them again. Closing twice is harmless.
func (s *Store) ClosePool(ctx context.Context, v int64) error {
	p := s.PartitionOf(v)
	key := voucherKey(p, v)
	n, err := s.c.Exists(ctx, key).Result()
	if err != nil || n == 0 {
		return err
	}
	_, err = s.c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.HSet(ctx, key, "stock", 0, "closed", 1)
		pipe.Del(ctx, poolKey(p, v))
		return nil
	})
	if err != nil {
		return fmt.Errorf("close pool of voucher %d: %w", v, err)
	}
	return nil
}

// InFlight reports whether partition p's stream still holds an entry of
// voucher v: an order admitted but not yet persisted (nor dead-lettered).
// The stream holds only such entries, so after a sale it is short.
func (s *Store) InFlight(ctx context.Context, v int64) (bool, error) {
	p := s.PartitionOf(v)
	start := "-"
	for {
		msgs, err := s.c.XRangeN(ctx, StreamKey(p), start, "+", 1000).Result()
		if err != nil {
			return false, fmt.Errorf("xrange %s: %w", StreamKey(p), err)
		}
		want := formatID(v)
		for _, m := range msgs {
			if id, _ := m.Values["voucher_id"].(string); id == want {
				return true, nil
			}
		}
		if len(msgs) < 1000 {
			return false, nil
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}

// SetPaused pauses or resumes voucher v's admissions. found is false when
// Redis does not hold the voucher: nothing is written then (a hash with a
// paused field alone would be no voucher; reconcile rebuilds it whole).
func (s *Store) SetPaused(ctx context.Context, v int64, paused bool) (found bool, err error) {
	key := voucherKey(s.PartitionOf(v), v)
	n, err := s.c.Exists(ctx, key).Result()
	if err != nil || n == 0 {
		return false, err
	}
	if err := s.c.HSet(ctx, key, "paused", bit(paused)).Err(); err != nil {
		return false, fmt.Errorf("pause voucher %d: %w", v, err)
	}
	return true, nil
}

// Change is an operator's change of a voucher on sale, as MySQL recorded it.
type Change struct {
	ID        int64
	VoucherID int64
	AddStock  int64
	EndsAt    time.Time // zero: unchanged
	ExpireAt  time.Time // the keys' new expiry, with EndsAt
}

// ApplyChange applies c to Redis exactly once (change.lua); applied reports
// whether this call did it.
func (s *Store) ApplyChange(ctx context.Context, c Change) (applied bool, err error) {
	p := s.PartitionOf(c.VoucherID)
	v := c.VoucherID
	keys := []string{voucherKey(p, v), changesKey(p, v), usersKey(p, v), releasedKey(p, v), poolKey(p, v)}
	n, err := lua.Change.Run(ctx, s.c, keys, c.ID, c.AddStock, unixMs(c.EndsAt), unixS(c.ExpireAt)).Int64()
	if err != nil {
		return false, fmt.Errorf("apply change %d of voucher %d: %w", c.ID, v, err)
	}
	return n == 1, nil
}
