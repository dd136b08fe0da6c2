// Package rdb owns flashsale's Redis state: every key, every script call and
// every stream command goes through a Store.
package rdb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
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
	buckets    sync.Map // voucher id -> its number of buckets, once seen
	durability Durability
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
	// Buckets: the stock is spread over this many buckets (0 or 1: one;
	// see keys.go). Only a count of units may have more than one.
	Buckets int
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
	return s.waitWritten(ctx, s.VoucherPartitions(v.ID, max(v.Buckets, 1))...)
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
	bv.Stock = share(v.Stock, n, b.n)
	putBucketHash(ctx, pipe, b, bv)
	if n > 1 {
		pipe.Del(ctx, b.movesOut())
	}
}

// putBucketHash writes bucket b's voucher hash and its expiry, and a
// pooled voucher's pool. The users hash and the released set take the same
// expiry from the hash's expire_s when the scripts create them.
func putBucketHash(ctx context.Context, pipe redis.Pipeliner, b bucket, v Voucher) {
	key := b.key()
	pipe.HSet(ctx, key, "stock", v.Stock, "limit", v.PerUserLimit, "daily", v.PerUserDailyLimit,
		"start_ms", unixMs(v.StartsAt), "end_ms", unixMs(v.EndsAt), "expire_s", unixS(v.ExpireAt),
		"pool", bit(v.Pooled), "closed", bit(v.Closed), "paused", bit(v.Paused), "buckets", max(v.Buckets, 1))
	expire(ctx, pipe, key, v.ExpireAt)
	if !v.Pooled {
		return
	}
	pk := b.pool()
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

// RemainingStock returns the units Redis will still admit for voucher v:
// the sum over its buckets, units being moved between them included;
// found is false when Redis does not know the voucher.
func (s *Store) RemainingStock(ctx context.Context, v int64) (n int64, found bool, err error) {
	nb, err := s.bucketsOf(ctx, v)
	if err != nil {
		return 0, false, err
	}
	st, err := s.readStocks(ctx, v, nb)
	if err != nil {
		return 0, false, err
	}
	return st.total(), st.found, nil
}

// userBucket is the bucket deciding user's claims of voucher v.
func (s *Store) userBucket(ctx context.Context, v int64, user string) (bucket, error) {
	n, err := s.bucketsOf(ctx, v)
	if err != nil {
		return bucket{}, err
	}
	return s.userBucketOf(v, user, n), nil
}

// UserCount returns how many orders of voucher v Redis counts for user.
func (s *Store) UserCount(ctx context.Context, v int64, user string) (int64, error) {
	b, err := s.userBucket(ctx, v, user)
	if err != nil {
		return 0, err
	}
	n, err := s.c.HGet(ctx, b.key(), userField(user)).Int64()
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
	out, errs, err := s.AdmitMany(ctx, []Claim{c})
	if err != nil {
		return Admission{}, err
	}
	return out[0], errs[0]
}

// AdmitMany runs the admission script for every claim in one pipelined
// round trip (EVALSHA each; a script Redis lost, after a restart, is loaded
// again and those claims run once more: NOSCRIPT means they did not run).
// A claim that found its bucket of a hot voucher dry is tried again after
// a refill (buckets.go). Results and errors align with claims; the error
// return is the round trip's own.
func (s *Store) AdmitMany(ctx context.Context, claims []Claim) ([]Admission, []error, error) {
	out, errs, err := s.admitBatch(ctx, claims)
	if err != nil {
		return out, errs, err
	}
	// soldOut: the least quantity each hot voucher was found sold out
	// for, in this batch: a larger claim need not look again.
	var soldOut map[int64]int64
	for i, c := range claims {
		if !errors.Is(errs[i], ErrSoldOut) || s.knownBuckets(c.VoucherID) == 1 {
			continue
		}
		need := max(c.Quantity, 1)
		if q, ok := soldOut[c.VoucherID]; ok && need >= q {
			continue
		}
		out[i], errs[i] = s.admitFromDry(ctx, c)
		if errors.Is(errs[i], ErrSoldOut) {
			if soldOut == nil {
				soldOut = map[int64]int64{}
			}
			soldOut[c.VoucherID] = need
		}
	}
	return out, errs, nil
}

// dryAttempts bounds how many times a claim refills its dry bucket and
// runs again before it is answered ErrOverloaded (other claims kept taking
// the units it brought).
const dryAttempts = 4

// admitFromDry admits claim c of a hot voucher, whose bucket was dry,
// after bringing units from the other buckets; ErrSoldOut when the voucher
// as a whole has fewer units than c asks.
func (s *Store) admitFromDry(ctx context.Context, c Claim) (Admission, error) {
	n := s.knownBuckets(c.VoucherID)
	home, need := UserBucket(c.UserID, n), max(c.Quantity, 1)
	for range dryAttempts {
		ok, err := s.refill(ctx, c, n, home, need)
		if err != nil {
			return Admission{}, err
		}
		if !ok {
			return Admission{}, ErrSoldOut
		}
		out, errs, err := s.admitBatch(ctx, []Claim{c})
		if err != nil {
			return Admission{}, err
		}
		if !errors.Is(errs[0], ErrSoldOut) {
			return out[0], errs[0]
		}
	}
	return Admission{}, ErrOverloaded
}

// admitBatch is one pipelined round trip of admissions, and another for
// the claims that must run again: NOSCRIPT, or routed by the wrong number
// of buckets. The claims of one bucket travel as one call of admit.lua,
// which decides them in order (admitCalls).
func (s *Store) admitBatch(ctx context.Context, claims []Claim) ([]Admission, []error, error) {
	out, errs := make([]Admission, len(claims)), make([]error, len(claims))
	pending := make([]int, len(claims))
	for i := range claims {
		pending[i] = i
	}
	for round := 0; round < 3 && len(pending) > 0; round++ {
		calls := s.admitCalls(claims, pending)
		parts := make([]int, len(calls))
		for j, c := range calls {
			parts[j] = c.b.p
		}
		groups, err := s.admitGroups(ctx, parts)
		if err != nil {
			return out, errs, err
		}
		cmds := make([]*redis.Cmd, len(calls))
		unreplicated := make([]error, len(calls))
		for _, g := range groups {
			for _, j := range g.js {
				cmds[j] = lua.Admit.EvalSha(ctx, g.pipe, calls[j].keys, calls[j].args...)
			}
			wait := s.queueWait(ctx, g.pipe)
			_, err := g.pipe.Exec(ctx)
			if err != nil && !isReplyError(cmds, g.js) {
				return out, errs, fmt.Errorf("admit pipeline: %w", err)
			}
			if werr := s.replicated(wait); werr != nil {
				for _, j := range g.js {
					unreplicated[j] = werr
				}
			}
		}
		var again []int
		reload := false
		var replays map[int][]int // partition -> replayed claims, when waiting for replicas
		if s.durability.waits() {
			replays = map[int][]int{}
		}
		for j, c := range calls {
			replies, err := cmds[j].Slice()
			switch {
			case err != nil && redis.HasErrorPrefix(err, "NOSCRIPT"):
				again, reload = append(again, c.claims...), true
				continue
			case err == nil && len(replies) != len(c.claims):
				err = fmt.Errorf("%d replies to %d claims", len(replies), len(c.claims))
			}
			if err != nil {
				for _, i := range c.claims {
					errs[i] = fmt.Errorf("admit: %w", err)
				}
				continue
			}
			for k, i := range c.claims {
				res, _ := replies[k].([]any)
				switch {
				case len(res) == 2 && res[0] == int64(10):
					// Routed by the wrong number of buckets: now known.
					n, _ := res[1].(int64)
					if n < 1 || n > MaxBuckets {
						errs[i] = fmt.Errorf("admit: voucher %d has %d buckets", claims[i].VoucherID, n)
						continue
					}
					s.buckets.Store(claims[i].VoucherID, int(n))
					again = append(again, i)
				default:
					out[i], errs[i] = admission(res, c.b.p)
					if errs[i] == nil && unreplicated[j] != nil {
						errs[i] = unreplicated[j] // admitted on the master, not known to survive it
					}
					if errs[i] == nil && out[i].Replayed && s.durability.waits() {
						replays[c.b.p] = append(replays[c.b.p], i)
					}
				}
			}
		}
		// A replay's first admission was written on another connection,
		// which this round's WAIT does not cover: one wait per partition
		// holding replays covers them all.
		for p, is := range replays {
			if err := s.waitWritten(ctx, p); err != nil {
				for _, i := range is {
					errs[i] = err
				}
			}
		}
		if reload {
			if err := lua.Admit.Load(ctx, s.c).Err(); err != nil {
				return out, errs, fmt.Errorf("reload admit script: %w", err)
			}
		}
		slices.Sort(again)
		pending = again
	}
	for _, i := range pending {
		errs[i] = fmt.Errorf("admit: voucher %d: no answer after three rounds", claims[i].VoucherID)
	}
	return out, errs, nil
}

// admitCall is one call of admit.lua: the claims (their indexes, in the
// batch's order) of one bucket.
type admitCall struct {
	b      bucket
	key    string // b.key()
	claims []int
	keys   []string
	args   []any
}

// maxClaimsPerCall bounds the claims of one admit.lua call: its HMGET
// unpacks two fields per claim, and Lua's unpack has a limit (a few
// thousand). A bucket's claims beyond it go in the next call of the same
// pipeline, which Redis runs after it: the order holds.
const maxClaimsPerCall = 256

// admitCalls groups the pending claims by the bucket that decides them,
// each group in the claims' order, the groups in the order of their first
// claim. A batch holds few buckets: a linear search finds a claim's.
func (s *Store) admitCalls(claims []Claim, pending []int) []admitCall {
	calls := make([]admitCall, 0, 1)
	for _, i := range pending {
		c := claims[i]
		n := s.knownBuckets(c.VoucherID)
		b := s.userBucketOf(c.VoucherID, c.UserID, n)
		k := slices.IndexFunc(calls, func(a admitCall) bool { return a.b == b && len(a.claims) < maxClaimsPerCall })
		if k < 0 {
			k = len(calls)
			key := b.key()
			calls = append(calls, admitCall{b: b, key: key, keys: []string{key, b.stream(), poolKey(key)},
				args: []any{c.VoucherID, n, int64(DayKeyTTL / time.Second)}})
		}
		call := &calls[k]
		idem, ttl := call.key+":idem:-", int64(0)
		if c.IdempotencyKey != "" {
			idem = idemKey(call.key, c.UserID, c.IdempotencyKey)
			ttl = max(int64(c.IdempotencyTTL/time.Second), 1)
		}
		call.claims = append(call.claims, i)
		call.keys = append(call.keys, dayKey(call.key, c.Day), idem)
		call.args = append(call.args, c.UserID, c.Now.UnixMilli(), c.Day, ttl, max(c.Quantity, 1))
	}
	return calls
}

// isReplyError reports whether a pipeline failed only because some command
// of cmds (those at js) got an error reply (each command then holds its
// own error).
func isReplyError(cmds []*redis.Cmd, js []int) bool {
	for _, j := range js {
		if err := cmds[j].Err(); err != nil && !errors.Is(err, redis.Nil) {
			var re redis.Error
			if !errors.As(err, &re) {
				return false
			}
		}
	}
	return true
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
	b, err := s.userBucket(ctx, o.VoucherID, o.UserID)
	if err != nil {
		return false, err
	}
	keys := []string{b.key(), b.day(o.Day), b.released(), b.pool()}
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
	b := s.bucketOf(v, 0) // a pool is never spread over buckets
	key := b.key()
	n, err := s.c.Exists(ctx, key).Result()
	if err != nil || n == 0 {
		return err
	}
	_, err = s.c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.HSet(ctx, key, "stock", 0, "closed", 1)
		pipe.Del(ctx, b.pool())
		return nil
	})
	if err != nil {
		return fmt.Errorf("close pool of voucher %d: %w", v, err)
	}
	return nil
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

func partitionsOf(buckets []bucket) []int {
	ps := make([]int, len(buckets))
	for i, b := range buckets {
		ps[i] = b.p
	}
	return ps
}

// Change is an operator's change of a voucher on sale, as MySQL recorded it.
type Change struct {
	ID        int64
	VoucherID int64
	AddStock  int64
	EndsAt    time.Time // zero: unchanged
	ExpireAt  time.Time // the keys' new expiry, with EndsAt
	Paused    *bool     // nil: unchanged
}

// ApplyChange applies c to Redis exactly once (change.lua) in each of the
// voucher's buckets: the new end and the pause to all, the added stock to
// bucket 0 (a dry bucket takes its share from there, buckets.go). applied
// reports whether this call applied it anywhere; a call after a crash half
// way applies it where it is missing. found is false when Redis holds no
// bucket of the voucher: nothing was written.
func (s *Store) ApplyChange(ctx context.Context, c Change) (applied, found bool, err error) {
	buckets, err := s.bucketsOfVoucher(ctx, c.VoucherID)
	if err != nil {
		return false, false, err
	}
	paused := -1
	if c.Paused != nil {
		paused = bit(*c.Paused)
	}
	for _, b := range buckets {
		add := c.AddStock
		if b.n > 0 {
			add = 0
		}
		keys := []string{b.key(), b.changes(), b.released(), b.pool()}
		n, err := lua.Change.Run(ctx, s.c, keys, c.ID, add, unixMs(c.EndsAt), unixS(c.ExpireAt), paused).Int64()
		if err != nil {
			return applied, found, fmt.Errorf("apply change %d of voucher %d: %w", c.ID, c.VoucherID, err)
		}
		applied = applied || n == 1
		found = found || n >= 0
	}
	if !found {
		return false, false, nil
	}
	return applied, true, s.waitWritten(ctx, partitionsOf(buckets)...)
}

// CreateVoucher puts v in Redis unless Redis holds it already: each
// bucket is written once (WATCH on its hash: a second writer, or a bucket
// written before a crash, is left as it is), bucket 0 last, so a voucher
// that exists for a gateway exists whole, and claims admitted meanwhile
// are never undone. changes are the voucher's changes v already reflects
// (MySQL's, read with v): they go in every bucket's set of changes applied,
// so change.lua never applies them again. created reports whether bucket 0
// was written now.
func (s *Store) CreateVoucher(ctx context.Context, v Voucher, changes []int64) (created bool, err error) {
	if err := v.checkBuckets(); err != nil {
		return false, err
	}
	n := max(v.Buckets, 1)
	for k := n - 1; k >= 0; k-- {
		b := s.bucketOf(v.ID, k)
		err := s.c.Watch(ctx, func(tx *redis.Tx) error {
			exists, err := tx.Exists(ctx, b.key()).Result()
			if err != nil || exists == 1 {
				return err
			}
			_, err = tx.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				s.putVoucherHash(ctx, pipe, b, v)
				if len(changes) > 0 {
					members := make([]any, len(changes))
					for i, id := range changes {
						members[i] = id
					}
					pipe.SAdd(ctx, b.changes(), members...)
					expire(ctx, pipe, b.changes(), v.ExpireAt)
				}
				return nil
			})
			if err == nil && k == 0 {
				created = true
			}
			return err
		}, b.key())
		if errors.Is(err, redis.TxFailedErr) {
			continue // another writer wrote it first: it exists
		}
		if err != nil {
			return false, fmt.Errorf("create voucher %d bucket %d: %w", v.ID, k, err)
		}
	}
	s.buckets.Store(v.ID, n)
	return created, s.waitWritten(ctx, s.VoucherPartitions(v.ID, n)...)
}
