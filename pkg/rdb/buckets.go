package rdb

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/lua"
	"github.com/flashsale/flashsale/pkg/rdb/internal/keyspace"
)

// A hot voucher (stock_buckets N > 1) spreads its stock over N buckets in
// N partitions, so on a Redis Cluster its admissions run on several
// masters' threads at once. A user's claims are always decided in that
// user's bucket (UserBucket), so per-user and per-day counts, and
// idempotency records, stay exact without crossing slots.
//
// A bucket that runs dry is refilled on demand: the claim that found it
// dry reads every bucket's stock, takes units from the richest (take.lua,
// which records the move) and gives them to its own (give.lua, once per
// move), then runs its admission again. sold_out is answered only when
// the buckets together hold fewer units than the claim asks, counting the
// units of moves taken but not yet given (a crash between the two halves):
// such a move is given first. Nothing is stranded, and a move lost half
// way loses no unit. A process refills one voucher once at a time
// (pkg/rdb/admission's detour.go), off the Batcher's pipelines: a sold-out tail holds up
// no other claim, and its claims share the refill's read and the units it
// brought.

// KnownBuckets is the number of buckets this process has seen voucher v
// have, 1 when it has not seen v: admit.lua tells a claim routed by the
// wrong number (a split raises it while the sale runs, pkg/rdb/split).
func (s *Store) KnownBuckets(v int64) int {
	if n, ok := s.buckets.Load(v); ok {
		return n.(int)
	}
	return 1
}

// LearnBuckets records that voucher v has n buckets, as a reply of
// admit.lua told (KnownBuckets).
func (s *Store) LearnBuckets(v int64, n int) { s.buckets.Store(v, n) }

// layoutOf reads voucher v's layout from its bucket 0 (1 bucket when Redis
// does not hold v): read anew each time, since a split changes it. The
// admission path routes by knownBuckets instead, which admit.lua corrects.
func (s *Store) layoutOf(ctx context.Context, v int64) (keyspace.Layout, error) {
	l, err := keyspace.ReadLayout(ctx, s.c, s.partitions, v)
	if err == nil && l.To == 0 {
		s.buckets.Store(v, l.N)
	}
	return l, err
}

// bucketsOf is voucher v's number of buckets now (layoutOf).
func (s *Store) bucketsOf(ctx context.Context, v int64) (int, error) {
	l, err := s.layoutOf(ctx, v)
	return l.N, err
}

// bucketsOfVoucher lists voucher v's buckets: every one that exists, the
// new ones too while it splits.
func (s *Store) bucketsOfVoucher(ctx context.Context, v int64) ([]bucket, error) {
	l, err := s.layoutOf(ctx, v)
	if err != nil {
		return nil, err
	}
	return s.bucketsIn(v, l), nil
}

// bucketsIn lists the buckets of voucher v laid out as l.
func (s *Store) bucketsIn(v int64, l keyspace.Layout) []bucket {
	return keyspace.Buckets(s.partitions, v, l)
}

// ReadVoucherPartitions reads voucher v's layout in Redis and returns the
// partitions whose streams may hold its orders (VoucherPartitions of what
// it read, the new buckets too while it splits).
func (s *Store) ReadVoucherPartitions(ctx context.Context, v int64) ([]int, error) {
	l, err := s.layoutOf(ctx, v)
	if err != nil {
		return nil, err
	}
	return s.VoucherPartitions(v, l.Span()), nil
}

// VoucherPartitions computes the partitions whose streams may hold orders
// of voucher v, which has buckets buckets; it reads nothing.
func (s *Store) VoucherPartitions(v int64, buckets int) []int {
	var out []int
	for b := range max(buckets, 1) {
		if p := s.bucketOf(v, b).P; !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// move is one move of units between buckets, taken and not yet given.
type move struct {
	id       string
	from, to bucket
	units    int64
}

// bucketStocks is what the buckets of a voucher hold.
type bucketStocks struct {
	found bool
	stock []int64
	owed  []move // taken from one bucket, not yet given to another
	done  []move // given, still recorded at their source (a mover stopped between the two)
}

// total is the units the voucher still has to admit.
func (st bucketStocks) total() int64 {
	var t int64
	for _, n := range st.stock {
		t += n
	}
	for _, m := range st.owed {
		t += m.units
	}
	return t
}

// readStocks reads the stock of each bucket of v (n of them) and the moves
// still owed, in one pipelined round trip (two when moves are recorded).
func (s *Store) readStocks(ctx context.Context, v int64, n int) (bucketStocks, error) {
	st := bucketStocks{stock: make([]int64, n)}
	pipe := s.c.Pipeline()
	stocks := make([]*redis.StringCmd, n)
	outs := make([]*redis.MapStringStringCmd, n)
	for b := range n {
		stocks[b] = pipe.HGet(ctx, s.bucketOf(v, b).Key(), "stock")
		if n > 1 {
			outs[b] = pipe.HGetAll(ctx, s.bucketOf(v, b).MovesOut())
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return st, fmt.Errorf("read stock of voucher %d: %w", v, err)
	}
	for b := range n {
		x, err := stocks[b].Int64()
		switch {
		case errors.Is(err, redis.Nil):
			continue
		case err != nil:
			return st, fmt.Errorf("stock of voucher %d bucket %d: %w", v, b, err)
		}
		st.found, st.stock[b] = true, x
		if outs[b] == nil {
			continue
		}
		for id, rec := range outs[b].Val() {
			to, units, ok := strings.Cut(rec, " ")
			tb, err1 := strconv.Atoi(to)
			u, err2 := strconv.ParseInt(units, 10, 64)
			if !ok || err1 != nil || err2 != nil || tb < 0 || tb >= MaxBuckets {
				return st, fmt.Errorf("voucher %d bucket %d: bad move %s %q", v, b, id, rec)
			}
			st.owed = append(st.owed, move{id: id, from: s.bucketOf(v, b), to: s.bucketOf(v, tb), units: u})
		}
	}
	if len(st.owed) == 0 {
		return st, nil
	}
	// A move recorded at its source may have been given already (its
	// recorder crashed between give and forget): those are not owed.
	pipe = s.c.Pipeline()
	given := make([]*redis.BoolCmd, len(st.owed))
	for i, m := range st.owed {
		given[i] = pipe.SIsMember(ctx, m.to.MovesIn(), m.id)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return st, fmt.Errorf("read moves of voucher %d: %w", v, err)
	}
	var owed []move
	for i, m := range st.owed {
		if given[i].Val() {
			st.done = append(st.done, m)
		} else {
			owed = append(owed, m)
		}
	}
	st.owed = owed
	return st, nil
}

// give completes move m: its units are given to its destination (once)
// and the record at its source is dropped.
func (s *Store) give(ctx context.Context, m move) error {
	if err := lua.Give.Run(ctx, s.c, []string{m.to.Key(), m.to.MovesIn()}, m.id, m.units, moveTime(m.id)).Err(); err != nil {
		return fmt.Errorf("give move %s of voucher %d: %w", m.id, m.to.V, err)
	}
	if err := s.c.HDel(ctx, m.from.MovesOut(), m.id).Err(); err != nil {
		return fmt.Errorf("forget move %s of voucher %d: %w", m.id, m.to.V, err)
	}
	return nil
}

// moveTime is the time part of move id "MS.RANDOM" (unix ms), "" for an
// id made before ids had one.
func moveTime(id string) string {
	ms, _, ok := strings.Cut(id, ".")
	if !ok {
		return ""
	}
	return ms
}

// moveUnits moves up to want units from bucket from to bucket to of
// voucher v, returning how many moved.
// The move's id is "MS.RANDOM", MS when it was made (ForgetMoves).
func (s *Store) moveUnits(ctx context.Context, from, to bucket, want int64) (int64, error) {
	ms := strconv.FormatInt(time.Now().UnixMilli(), 10)
	id := ms + "." + strconv.FormatUint(rand.Uint64(), 36)
	n, err := lua.Take.Run(ctx, s.c, []string{from.Key(), from.MovesOut()}, id, to.N, want, ms).Int64()
	if err != nil || n == 0 {
		if err != nil {
			err = fmt.Errorf("take units of voucher %d bucket %d: %w", from.V, from.N, err)
		}
		return 0, err
	}
	// The units are taken: give them even if the claim's deadline passes
	// meanwhile, or they wait, unseen by claims (a false sold_out), for
	// the next dry claim or the reaper's mover.
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveTimeout)
	defer cancel()
	return n, s.give(gctx, move{id: id, from: from, to: to, units: n})
}

// giveTimeout bounds giving units taken by a move.
const giveTimeout = 5 * time.Second

// forgetMovesScan bounds the ids one SSCAN of ForgetMoves reads, and one
// forgetmoves.lua call removes.
const forgetMovesScan = 500

// Refill brings units to bucket home of voucher v's n from the others,
// when the voucher as a whole still has at least need; false when it
// does not (the voucher is sold out for a claim of need). A claim that
// found its bucket dry calls it (pkg/rdb/admission's detour.go).
func (s *Store) Refill(ctx context.Context, v int64, n, home int, need int64) (bool, error) {
	st, err := s.readStocks(ctx, v, n)
	if err != nil {
		return false, err
	}
	if len(st.owed) > 0 {
		for _, m := range st.owed {
			if err := s.give(ctx, m); err != nil {
				return false, err
			}
		}
		if st, err = s.readStocks(ctx, v, n); err != nil {
			return false, err
		}
	}
	if !st.found || st.total() < need {
		// The reads of several masters are no snapshot: a move between
		// two other buckets may have been read at neither end. Such a
		// move is over in a round trip; a second look sees its units.
		if st, err = s.readStocks(ctx, v, n); err != nil {
			return false, err
		}
		if !st.found || st.total() < need {
			return false, nil
		}
	}
	// Richest first; take at least what the claim lacks, and half of a
	// rich donor, so the next claims here find units too.
	donors := make([]int, 0, n-1)
	for b := range n {
		if b != home && st.stock[b] > 0 {
			donors = append(donors, b)
		}
	}
	slices.SortFunc(donors, func(a, b int) int { return int(st.stock[b] - st.stock[a]) })
	have := st.stock[home]
	for _, d := range donors {
		if have >= need {
			break
		}
		want := max(need-have, st.stock[d]/2)
		got, err := s.moveUnits(ctx, s.bucketOf(v, d), s.bucketOf(v, home), want)
		if err != nil {
			return false, err
		}
		have += got
	}
	return true, nil
}

// ForgetMoves forgets the ids of voucher v's moves between buckets made up
// to upto (each bucket's moves:in set names the moves given to it, so that
// a move given again is given once): a sale without an end then keeps
// the ids of its recent moves only. Every bucket first refuses takes of
// ids made up to upto; every move still owed is then given (FinishMoves);
// then each bucket records upto as the time up to which its moves were
// given and drops their ids (forgetmoves.lua). A caller still holding a
// move made by then is answered "given" (give.lua); a mover whose clock
// is behind upto is refused its take (it moves nothing, and its claim
// sees the voucher dry), so upto is taken well before the clock's now. A
// voucher splitting, or of one bucket, is left alone. It returns the ids
// removed.
func (s *Store) ForgetMoves(ctx context.Context, v int64, upto time.Time) (int, error) {
	l, err := s.layoutOf(ctx, v)
	if err != nil || l.Span() == 1 || l.To != 0 {
		return 0, err
	}
	buckets := s.bucketsIn(v, l)
	ms := upto.UnixMilli()
	for _, b := range buckets {
		if err := lua.ForgetMoves.Run(ctx, s.c, []string{b.Key(), b.MovesIn()}, "takes", ms).Err(); err != nil {
			return 0, fmt.Errorf("forget moves of voucher %d bucket %d: %w", v, b.N, err)
		}
	}
	if _, err := s.FinishMoves(ctx, v); err != nil {
		return 0, err
	}
	forgot := 0
	for _, b := range buckets {
		for cursor := uint64(0); ; {
			ids, next, err := s.c.SScan(ctx, b.MovesIn(), cursor, "", forgetMovesScan).Result()
			if err != nil {
				return forgot, fmt.Errorf("read moves of voucher %d bucket %d: %w", v, b.N, err)
			}
			args := []any{"given", ms}
			for _, id := range ids {
				args = append(args, id)
			}
			n, err := lua.ForgetMoves.Run(ctx, s.c, []string{b.Key(), b.MovesIn()}, args...).Int()
			if err != nil {
				return forgot, fmt.Errorf("forget moves of voucher %d bucket %d: %w", v, b.N, err)
			}
			forgot += n
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	return forgot, nil
}

// FinishMoves gives every move of voucher v taken and not yet given (its
// mover crashed half way), and drops the records of those given whose
// mover stopped before it dropped them; the reaper calls it, and so does
// a claim that finds the voucher dry. It returns how many it gave.
func (s *Store) FinishMoves(ctx context.Context, v int64) (int, error) {
	l, err := s.layoutOf(ctx, v)
	if err != nil || l.Span() == 1 {
		return 0, err
	}
	st, err := s.readStocks(ctx, v, l.Span())
	if err != nil {
		return 0, err
	}
	for _, m := range st.owed {
		if err := s.give(ctx, m); err != nil {
			return 0, err
		}
	}
	for _, m := range st.done {
		if err := s.c.HDel(ctx, m.from.MovesOut(), m.id).Err(); err != nil {
			return 0, fmt.Errorf("forget move %s of voucher %d: %w", m.id, m.to.V, err)
		}
	}
	return len(st.owed), nil
}

// ShareEvenly moves voucher v's units between its buckets until each
// holds its share of them (what PutVoucher would give it), from the
// richest to the poorest, and stops early when claims took units
// meanwhile (even enough). It refuses a voucher that is splitting
// (ErrSplitting): its new buckets are closed. A split spreads the
// units so with it once switched (pkg/rdb/split).
func (s *Store) ShareEvenly(ctx context.Context, v int64) error {
	l, err := s.layoutOf(ctx, v)
	if err != nil {
		return err
	}
	if l.To != 0 {
		return fmt.Errorf("share the units of voucher %d: %w", v, ErrSplitting)
	}
	st, err := s.readStocks(ctx, v, l.N)
	if err != nil {
		return err
	}
	var total int64
	for _, x := range st.stock {
		total += x
	}
	over := make([]int64, l.N) // a bucket's units above its share, or below (< 0)
	for b, x := range st.stock {
		over[b] = x - share(total, l.N, b)
	}
	for { // from the richest to the poorest, until each holds its share
		from, to := 0, 0
		for b := range over {
			if over[b] > over[from] {
				from = b
			}
			if over[b] < over[to] {
				to = b
			}
		}
		want := min(over[from], -over[to])
		if want <= 0 {
			return nil
		}
		got, err := s.moveUnits(ctx, s.bucketOf(v, from), s.bucketOf(v, to), want)
		if err != nil || got < want { // claims took them meanwhile: even enough
			return err
		}
		over[from] -= got
		over[to] += got
	}
}

// share is bucket b's part of stock units spread over n buckets.
func share(stock int64, n, b int) int64 {
	s := stock / int64(n)
	if int64(b) < stock%int64(n) {
		s++
	}
	return s
}

// Levels reads each bucket's level, of each voucher, in one pipelined
// round trip: levels[i][b] is bucket b of vouchers[i], which has
// buckets[i] buckets. A bucket's level is its stock plus the units moved
// out of it to other buckets net of those moved in (take.lua, give.lua
// count them in its hash's moved): admissions alone lower it, so the
// units a bucket admitted between two readings are the fall of its level
// (less the units given back meanwhile by releases and top-ups, which
// raise it), read without a write on the claim's path. A bucket Redis does
// not hold reads NoLevel.
func (s *Store) Levels(ctx context.Context, vouchers []int64, buckets []int) ([][]int64, error) {
	if len(vouchers) == 0 {
		return nil, nil
	}
	pipe := s.c.Pipeline()
	cmds := make([][]*redis.SliceCmd, len(vouchers))
	for i, v := range vouchers {
		cmds[i] = make([]*redis.SliceCmd, max(buckets[i], 1))
		for b := range cmds[i] {
			cmds[i][b] = pipe.HMGet(ctx, s.bucketOf(v, b).Key(), "stock", "moved")
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("read the buckets' levels: %w", err)
	}
	out := make([][]int64, len(vouchers))
	for i := range cmds {
		out[i] = make([]int64, len(cmds[i]))
		for b, c := range cmds[i] {
			f := c.Val()
			if f[0] == nil {
				out[i][b] = NoLevel
				continue
			}
			for _, x := range f {
				str, _ := x.(string)
				n, _ := strconv.ParseInt(str, 10, 64)
				out[i][b] += n
			}
		}
	}
	return out, nil
}

// NoLevel is the level Levels reads of a bucket Redis does not hold.
const NoLevel = math.MinInt64

// MastersOf names the master that decides each bucket of each voucher, as
// Levels lists them: on a Redis Cluster the address of its slot's master
// as this process last learned the slots; on one Redis (or one behind
// Sentinel) "redis" for every bucket.
func (s *Store) MastersOf(ctx context.Context, vouchers []int64, buckets []int) ([][]string, error) {
	cc, cluster := s.c.(*redis.ClusterClient)
	out := make([][]string, len(vouchers))
	for i, v := range vouchers {
		out[i] = make([]string, max(buckets[i], 1))
		for b := range out[i] {
			if !cluster {
				out[i][b] = "redis"
				continue
			}
			m, err := cc.MasterForKey(ctx, s.bucketOf(v, b).Key())
			if err != nil {
				return nil, fmt.Errorf("master of voucher %d bucket %d: %w", v, b, err)
			}
			out[i][b] = m.Options().Addr
		}
	}
	return out, nil
}

// Spread is how a count of a voucher's buckets sits on a cluster's
// masters (BucketSpread).
type Spread struct {
	// ByMaster is the buckets on each master the voucher's partitions
	// reach (0 where none of them is).
	ByMaster map[string]int
	// Even: each of those masters holds ⌊n/M⌋ or ⌈n/M⌉ of the n.
	Even bool
	// Below and Above are the nearest counts that would share the
	// masters evenly (multiples of the step, above it, at most
	// MaxBuckets), 0 for none.
	Below, Above int
}

// BucketSpread is where n buckets of voucher v would be: on a cluster,
// the buckets each master its partitions reach holds (bucket b is in
// partition (v's + b) mod partitions, its slot's master's), whether they
// share them evenly, and the nearest counts that would, among the
// multiples of step above step (a split's counts: each of step buckets
// splits into as many). Nil on one Redis: one thread decides every bucket.
func (s *Store) BucketSpread(ctx context.Context, v int64, n, step int) (*Spread, error) {
	cc, ok := s.c.(*redis.ClusterClient)
	if !ok {
		return nil, nil
	}
	masterOf := make([]string, s.partitions) // by bucket mod partitions
	reach := map[string]int{}
	for b := range s.partitions {
		m, err := cc.MasterForKey(ctx, s.bucketOf(v, b).Key())
		if err != nil {
			return nil, fmt.Errorf("master of voucher %d bucket %d: %w", v, b, err)
		}
		masterOf[b] = m.Options().Addr
		reach[masterOf[b]] = 0
	}
	count := func(n int) map[string]int {
		by := make(map[string]int, len(reach))
		for m := range reach {
			by[m] = 0
		}
		for b := range n {
			by[masterOf[b%s.partitions]]++
		}
		return by
	}
	even := func(n int) bool {
		lo := n / len(reach)
		hi := lo
		if n%len(reach) != 0 {
			hi++
		}
		for _, c := range count(n) {
			if c < lo || c > hi {
				return false
			}
		}
		return true
	}
	out := &Spread{ByMaster: count(n), Even: even(n)}
	step = max(step, 1)
	for c := 2 * step; c <= MaxBuckets; c += step {
		switch {
		case c < n && even(c):
			out.Below = c
		case c > n && even(c) && out.Above == 0:
			out.Above = c
		}
	}
	return out, nil
}
