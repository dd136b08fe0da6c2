package rdb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/lua"
)

// A split raises a voucher's buckets from N to M, a multiple of N, while
// its sale runs. A user's claims are decided in bucket FNV-1a(user) mod N;
// after the split in FNV-1a(user) mod M, which is the same bucket or one
// of its children b + jN (j = 1..M/N-1), all new: no user moves between
// old buckets. The invariant: at any time a user's claims are decided in
// at most one bucket, and that bucket holds the user's counts (u:USER,
// the day hashes), idempotency records and the voucher's released orders.
// The steps, each on one bucket, each a no-op when done already (split.lua),
// so a split killed between any two is resumed by running it again:
//
//	precopy each old bucket: "N" -> "N~M": it decides every claim as
//	        before, and names in its dirty list the records it writes of
//	        the users whose bucket of M is another (the moving users); it
//	        refuses the moving users' releases (left owed, applied after
//	        the split), so their counts only grow until the switch, and
//	        releases the others' as at any time; it applies changes but
//	        a new end (whose expiry the copies carry) or a waiting room
//	        (left owed likewise)
//	create  each new bucket, closed ("M>0": it answers 21 to every claim),
//	        from bucket 0's settings and changes applied, with no stock
//	copy    the moving users' counts, day counts and idempotency records,
//	        the proofs of work spent and the released orders, from each old
//	        bucket into its children while they are closed, as they are
//	        now (a count only raises its copy: copies by two callers, read
//	        at different times, leave the larger)
//	catchup the records named in the dirty lists since, again, round after
//	        round while the rounds shrink (splitCalm, splitRounds): what
//	        the moving users wrote while the last round copied
//	freeze  each old bucket: "N>M": it answers 21 (splitting) to the moving
//	        users (they try again, within their request's deadline) and
//	        keeps deciding the others; it refuses every change (left owed)
//	last    the records named since the last round: the moving users'
//	        records are then whole in their new buckets
//	open    each new bucket: "M", after copying again bucket 0's settings
//	        and changes applied (a change the pre-copy applied after the
//	        create read them); nobody routes a claim to it yet
//	switch  each old bucket, bucket 0 last: "M"; a claim routed by N is told
//	        {10, M} and routed again, to the user's one bucket
//	drop    the moving users' counts from the old buckets: stale copies,
//	        never read (a claim or release routed by N is routed again
//	        first); the fields this call copied, or, for a split found
//	        switched (splitDone), every moving user's found by HSCAN; and
//	        the dirty lists
//	spread  the units, shared evenly over the buckets by moves
//	        (take.lua/give.lua): without it the children refill when dry
//	        (a split found switched, by splitDone, is not spread)
//
// The moving users wait from freeze to switch: the copy of what they
// wrote during the last catch-up round, not of the bucket, as a live
// migration of a virtual machine copies its memory before it stops it.
// A user's pending orders admitted before stay indexed (o:USER) in the
// old bucket, whose stream holds them: bucket 0 records the counts it had
// (was), and a listing reads the user's bucket at each (userBuckets).
// Stock is never copied, only moved, and moves are recorded at their
// source: the voucher sells exactly its stock through any crash.
//
// What waits for the switch, and why. A moving user's release (a release
// lowers counts, and a copy only raises its copy); a new end (the copies
// carry the keys' expiry as it was); a waiting room (never put on a
// voucher that splits); and any change once the old buckets are frozen
// (the new buckets have taken their last copy of bucket 0's settings).
// They stay owed in MySQL (release.lua and change.lua answer -2,
// ErrSplitting) and the reaper's releaser makes them in its first round
// after the switch: the wait is the rest of the split plus at most
// FLASHSALE_REAPER_RELEASE_INTERVAL. How long a split and its freeze take
// is measured in docs/BENCHMARKS.md, "A hot voucher split by itself"; one
// that cannot converge (the splitter copying slower than the buyers
// write) ends its catch-up after splitRounds. Everything else is made
// at once: the releases of the buyers who stay in their bucket, and
// top-ups, pauses, resumes, proof-of-work and access changes while the
// old buckets pre-copy (TestASplittingVoucherReleasesAndChangesWhatItCan).

// SplitSteps are a split's steps, in order (splitHook's names).
var SplitSteps = []string{"precopy", "create", "copy", "catchup", "freeze", "last", "open", "switch", "drop", "spread"}

// ErrSplitRefused refuses a split asked of a voucher that cannot take it (fewer
// buckets than it has, not a multiple of them, above MaxBuckets, another
// split under way, or Redis does not hold it).
var ErrSplitRefused = errors.New("split refused")

// splitConfig are bucket 0's fields a new bucket copies: the voucher's
// settings and the changes applied to them (change.lua).
var splitConfig = []string{"limit", "daily", "start_ms", "end_ms", "expire_s", "pool", "closed", "paused", "draw",
	"pow", "access", "room", "room_pre_ms", "room_pass_ms", "end_change", "pause_change", "pow_change",
	"room_change", "access_change"}

// splitChunk bounds the fields or members one copy call carries,
// splitScan the fields an HSCAN of a bucket reads a call (COUNT): a
// bucket of a million buyers is read in 200 calls and written in 400;
// and splitLog the entries of a dirty list one LRANGE reads.
const (
	splitChunk = 2500
	splitScan  = 5000
	splitLog   = 10000
)

// The catch-up rounds before the freeze: they end when a round copied at
// most splitCalm records (one copy call a new bucket: the freeze then
// holds the moving users for about one), when a round copied more than
// nine tenths of the one before (copying no faster than they are written:
// more rounds would not shorten the freeze), or after splitRounds.
const (
	splitCalm   = splitChunk
	splitRounds = 16
)

// Split raises voucher v's buckets to to (a multiple of its number now, at
// most MaxBuckets) while its sale runs, or completes a split to to that
// was under way; a voucher that has to buckets already is left as it is.
// The reaper runs it (pkg/reaper's splitter); any number of callers may,
// at once or one after a crash of another. It returns what this call
// spent, an error's included.
func (s *Store) Split(ctx context.Context, v int64, to int) (SplitTimes, error) {
	b0 := s.bucketOf(v, 0)
	raw, err := s.c.HMGet(ctx, b0.key(), "buckets", "stock").Result()
	if err != nil {
		return SplitTimes{}, fmt.Errorf("split voucher %d: %w", v, err)
	}
	if raw[1] == nil {
		return SplitTimes{}, fmt.Errorf("split voucher %d: not in Redis: %w", v, ErrSplitRefused)
	}
	str, _ := raw[0].(string)
	l, err := parseLayout(str)
	switch {
	case err != nil:
		return SplitTimes{}, fmt.Errorf("split voucher %d: %w", v, err)
	case l.to == 0 && l.n == to:
		return s.splitDone(ctx, v, to)
	case l.to != 0 && l.to != to:
		return SplitTimes{}, fmt.Errorf("split voucher %d to %d: splitting to %d already: %w", v, to, l.to, ErrSplitRefused)
	case to > MaxBuckets || to < l.n || to%l.n != 0:
		return SplitTimes{}, fmt.Errorf("split voucher %d from %d to %d buckets: %w", v, l.n, to, ErrSplitRefused)
	}
	sp := splitting{s: s, v: v, n: l.n, m: to}
	for _, step := range []func(context.Context) error{sp.precopy, sp.create, sp.copy, sp.catchup, sp.freeze, sp.last, sp.open, sp.switchOver, sp.drop, sp.spread} {
		if err := step(ctx); err != nil {
			return sp.times(), fmt.Errorf("split voucher %d from %d to %d buckets: %w", v, l.n, to, err)
		}
	}
	return sp.times(), nil
}

// SplitTimes is what one call of Split spent: how long it kept the moving
// users waiting (Paused: from the start of its freeze to the end of its
// switch; 0 when it found them switched), and each step it began, in
// order, with its time (the reaper logs them).
type SplitTimes struct {
	Paused time.Duration
	Steps  []SplitStep
}

// begunStep is a step a call of Split began, and when.
type begunStep struct {
	name string
	at   time.Time
}

// SplitStep is a step of SplitSteps and how long a call of Split spent
// on it.
type SplitStep struct {
	Name string
	Took time.Duration
}

// splitDone completes a split of voucher v to to whose buckets all took
// to (switch): the moving users' counts are dropped from the old buckets
// (again: a split killed during its drop left some), whose number bucket
// 0 recorded last in was. A voucher never split has nothing to drop.
func (s *Store) splitDone(ctx context.Context, v int64, to int) (SplitTimes, error) {
	was, err := s.c.HGet(ctx, s.bucketOf(v, 0).key(), "was").Result()
	if errors.Is(err, redis.Nil) {
		return SplitTimes{}, nil
	} else if err != nil {
		return SplitTimes{}, fmt.Errorf("split voucher %d: %w", v, err)
	}
	fs := strings.Fields(was)
	if len(fs) == 0 {
		return SplitTimes{}, nil
	}
	n, err := strconv.Atoi(fs[len(fs)-1])
	if err != nil || n < 1 || to%n != 0 {
		return SplitTimes{}, fmt.Errorf("split voucher %d: bad was %q", v, was)
	}
	sp := splitting{s: s, v: v, n: n, m: to, step: slices.Index(SplitSteps, "drop")}
	err = sp.drop(ctx)
	return sp.times(), err
}

// splitting is one split of voucher v from n to m buckets.
type splitting struct {
	s    *Store
	v    int64
	n, m int
	step int // the next of SplitSteps
	// frozen and switched: when this call's freeze began, and its
	// switch ended (zero: not reached).
	frozen, switched time.Time
	// begun: the steps this call began, and when (begin).
	begun []begunStep
	// expireS: when the voucher's keys expire (unix s, "0" never), as
	// bucket 0 says (create reads it, for the sets copied after it).
	expireS string
	// moved: the moving users' fields this call copied, by the old hash
	// holding them (its drop needs no scan); nil when it copied none.
	moved map[string][]string
	// logged: the entries of each old bucket's dirty list this call
	// copied, by old bucket.
	logged map[int]int64
	// since: by old bucket, the ms after which its admissions are named
	// in its dirty list (split.lua precopy; absent: none are).
	since map[int]int64
}

// copied records the moving users' fields names of old hash key, copied.
func (sp *splitting) copied(key string, names []string) {
	if sp.moved == nil {
		sp.moved = map[string][]string{}
	}
	sp.moved[key] = append(sp.moved[key], names...)
}

// times is what this call spent so far: the moving users' wait, and each
// step's time (the last one's until now).
func (sp *splitting) times() SplitTimes {
	t := SplitTimes{Steps: make([]SplitStep, len(sp.begun))}
	now := time.Now()
	for i, st := range sp.begun {
		end := now
		if i+1 < len(sp.begun) {
			end = sp.begun[i+1].at
		}
		t.Steps[i] = SplitStep{Name: st.name, Took: end.Sub(st.at)}
	}
	switch {
	case sp.frozen.IsZero():
	case sp.switched.IsZero():
		t.Paused = now.Sub(sp.frozen)
	default:
		t.Paused = sp.switched.Sub(sp.frozen)
	}
	return t
}

// run runs step of split.lua on bucket b (KEYS: its hash, then keys).
func (sp *splitting) run(ctx context.Context, step string, b bucket, keys []string, args ...any) error {
	err := lua.Split.Run(ctx, sp.s.c, append([]string{b.key()}, keys...),
		append([]any{step, sp.n, sp.m}, args...)...).Err()
	if err != nil {
		return fmt.Errorf("%s %s: %w", step, b.key(), err)
	}
	return nil
}

// begin marks the start of the next step, where a test's hook may stop
// the split as a kill would.
func (sp *splitting) begin() error {
	name := SplitSteps[sp.step]
	sp.step++
	sp.begun = append(sp.begun, begunStep{name, time.Now()})
	if sp.s.splitHook != nil {
		return sp.s.splitHook(name)
	}
	return nil
}

func (sp *splitting) old() []bucket {
	out := make([]bucket, sp.n)
	for b := range out {
		out[b] = sp.s.bucketOf(sp.v, b)
	}
	return out
}

func (sp *splitting) children(parent int) []bucket {
	var out []bucket
	for c := parent + sp.n; c < sp.m; c += sp.n {
		out = append(out, sp.s.bucketOf(sp.v, c))
	}
	return out
}

// moving reports whether user's bucket changes in the split: which new
// bucket it moves to, or -1.
func (sp *splitting) moving(user string) int {
	if b := UserBucket(user, sp.m); b >= sp.n {
		return b
	}
	return -1
}

func (sp *splitting) precopy(ctx context.Context) error {
	if err := sp.begin(); err != nil {
		return err
	}
	for _, b := range sp.old() { // bucket 0 first: it refuses changes from then on
		if err := sp.run(ctx, "precopy", b, []string{b.dirty(), b.stream()}); err != nil {
			return err
		}
	}
	return nil
}

func (sp *splitting) freeze(ctx context.Context) error {
	if err := sp.begin(); err != nil {
		return err
	}
	sp.frozen = time.Now()
	for _, b := range sp.old() {
		if err := sp.run(ctx, "freeze", b, nil); err != nil {
			return err
		}
	}
	return nil
}

// catchup copies the records the dirty lists name, round after round,
// until a round is short or no shorter than the one before.
func (sp *splitting) catchup(ctx context.Context) error {
	if err := sp.begin(); err != nil {
		return err
	}
	prev := int64(-1)
	for range splitRounds {
		n, err := sp.recopy(ctx)
		if err != nil {
			return err
		}
		if n <= splitCalm || (prev >= 0 && n*10 > prev*9) {
			return nil
		}
		prev = n
	}
	return nil
}

// last copies the records named since the last round, once frozen.
func (sp *splitting) last(ctx context.Context) error {
	if err := sp.begin(); err != nil {
		return err
	}
	_, err := sp.recopy(ctx)
	return err
}

// recopy copies the records each old bucket's dirty list names past what
// this call copied of it, up to the list's end when the round began (a
// round ends even while the list grows faster than it is read): how many
// entries it read.
func (sp *splitting) recopy(ctx context.Context) (int64, error) {
	if sp.logged == nil {
		sp.logged = map[int]int64{}
	}
	var read int64
	for _, b := range sp.old() {
		end, err := sp.s.c.LLen(ctx, b.dirty()).Result()
		if err != nil {
			return read, fmt.Errorf("read %s: %w", b.dirty(), err)
		}
		for from := sp.logged[b.n]; from < end; from = sp.logged[b.n] {
			page, err := sp.s.c.LRange(ctx, b.dirty(), from, min(from+splitLog, end)-1).Result()
			if err != nil {
				return read, fmt.Errorf("read %s: %w", b.dirty(), err)
			}
			if len(page) == 0 { // gone: expired with its voucher
				break
			}
			if err := sp.copyNamed(ctx, b, page); err != nil {
				return read, err
			}
			sp.logged[b.n] += int64(len(page))
			read += int64(len(page))
		}
	}
	return read, nil
}

// copyNamed copies the records of old bucket b that entries of its dirty
// list name with their values (admit.lua): "u:USER COUNT" a count, "day:D
// USER COUNT" a day count, "idem:USER:K VALUE EXP_MS" and "proof:S 1
// EXP_MS" keys. Of b it reads only a day hash's expiry: the bucket
// deciding the sale is the busiest, and its list is read a page a
// command.
func (sp *splitting) copyNamed(ctx context.Context, b bucket, entries []string) error {
	counts := map[int][]any{}
	days := map[string]map[int][]any{} // day -> new bucket -> user, count
	keys := keyCopies{}
	var names []string
	dayNames := map[string][]string{}
	now := time.Now().UnixMilli()
	for _, e := range entries {
		switch rest, count, _ := cutLast(e); {
		case e == "" || strings.HasPrefix(e, "since "):
		case strings.HasPrefix(e, userPrefix):
			c := sp.moving(strings.TrimPrefix(rest, userPrefix))
			counts[c] = append(counts[c], rest, count)
			names = append(names, rest)
		case strings.HasPrefix(e, "day:"):
			day, user, _ := strings.Cut(strings.TrimPrefix(rest, "day:"), " ")
			if days[day] == nil {
				days[day] = map[int][]any{}
			}
			c := sp.moving(user)
			days[day][c] = append(days[day][c], user, count)
			dayNames[day] = append(dayNames[day], user)
		default: // a key: count is its expiry
			name, value, _ := cutLast(rest)
			exp, err := strconv.ParseInt(count, 10, 64)
			if err != nil || exp <= now {
				continue // gone by now
			}
			sp.addKey(keys, b, name, value, exp-now)
		}
	}
	if err := sp.copyFields(ctx, counts, bucket.key, "0"); err != nil {
		return err
	}
	sp.copied(b.key(), names)
	for day, fields := range days {
		ms, err := sp.ttl(ctx, b.day(day))
		if err != nil {
			return err
		}
		if err := sp.copyFields(ctx, fields, func(c bucket) string { return c.day(day) }, "+"+strconv.FormatInt(ms, 10)); err != nil {
			return err
		}
		sp.copied(b.day(day), dayNames[day])
	}
	return sp.writeKeys(ctx, keys)
}

// cutLast cuts s around its last space.
func cutLast(s string) (before, after string, found bool) {
	if i := strings.LastIndexByte(s, ' '); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}

func (sp *splitting) create(ctx context.Context) error {
	if err := sp.begin(); err != nil {
		return err
	}
	config, changes, err := sp.settings(ctx)
	if err != nil {
		return err
	}
	for c := sp.n; c < sp.m; c++ {
		child := sp.s.bucketOf(sp.v, c)
		if err := sp.run(ctx, "create", child, nil, config...); err != nil {
			return err
		}
		if err := sp.copyMembers(ctx, child, child.changes(), changes); err != nil {
			return err
		}
	}
	return nil
}

// settings reads bucket 0's settings (splitConfig's fields, as field,
// value pairs) and the ids of the changes applied to it, and notes when
// the voucher's keys expire (expireS).
func (sp *splitting) settings(ctx context.Context) (config []any, changes []string, err error) {
	b0 := sp.s.bucketOf(sp.v, 0)
	vals, err := sp.s.c.HMGet(ctx, b0.key(), splitConfig...).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("read settings: %w", err)
	}
	for i, f := range splitConfig {
		if str, ok := vals[i].(string); ok {
			config = append(config, f, str)
		}
	}
	str, _ := vals[slices.Index(splitConfig, "expire_s")].(string)
	sp.expireS = cmp.Or(str, "0")
	changes, err = sp.s.c.SMembers(ctx, b0.changes()).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("read changes applied: %w", err)
	}
	return config, changes, nil
}

// copyMembers adds members to set key of closed new bucket child.
func (sp *splitting) copyMembers(ctx context.Context, child bucket, key string, members []string) error {
	for i := 0; i < len(members); i += splitChunk {
		args := []any{"set", sp.expireS}
		for _, m := range members[i:min(i+splitChunk, len(members))] {
			args = append(args, m)
		}
		if err := sp.run(ctx, "copy", child, []string{key}, args...); err != nil {
			return err
		}
	}
	return nil
}

// copyFields writes fields (field, value pairs by new bucket: counts)
// into hash keyOf(child) of each closed new bucket, each where it raises
// the count there (copies read at different times leave the larger).
func (sp *splitting) copyFields(ctx context.Context, fields map[int][]any, keyOf func(bucket) string, expire string) error {
	for c, pairs := range fields {
		child := sp.s.bucketOf(sp.v, c)
		for i := 0; i < len(pairs); i += 2 * splitChunk {
			args := append([]any{"most", expire}, pairs[i:min(i+2*splitChunk, len(pairs))]...)
			if err := sp.run(ctx, "copy", child, []string{keyOf(child)}, args...); err != nil {
				return err
			}
		}
	}
	return nil
}

// node is the client of the node holding key: a cluster's master of its
// slot, which alone can SCAN for the keys of that slot.
func (s *Store) node(ctx context.Context, key string) (redis.Cmdable, error) {
	if cc, ok := s.c.(*redis.ClusterClient); ok {
		return cc.MasterForKey(ctx, key)
	}
	return s.c, nil
}

// bucketKeys calls f with each key of bucket b's own named by suffix
// (day:, idem:, proof:), found by SCAN on b's node.
func (s *Store) bucketKeys(ctx context.Context, b bucket, f func(key, suffix string) error) error {
	c, err := s.node(ctx, b.key())
	if err != nil {
		return err
	}
	prefix := b.key() + ":"
	it := c.Scan(ctx, 0, prefix+"*", splitScan).Iterator()
	for it.Next(ctx) {
		key := it.Val()
		rest := strings.TrimPrefix(key, prefix)
		if strings.HasPrefix(rest, "day:") || strings.HasPrefix(rest, "idem:") || strings.HasPrefix(rest, "proof:") {
			if err := f(key, rest); err != nil {
				return err
			}
		}
	}
	return it.Err()
}

// movers calls f with the moving users' fields of hash key, field
// prefix (userPrefix, or "" for a day hash), page by page: field, value
// pairs by new bucket.
func (sp *splitting) movers(ctx context.Context, key, prefix string, f func(map[int][]any, []string) error) error {
	var cursor uint64
	for {
		kv, next, err := sp.s.c.HScan(ctx, key, cursor, prefix+"*", splitScan).Result()
		if err != nil {
			return fmt.Errorf("scan %s: %w", key, err)
		}
		page, names := map[int][]any{}, []string(nil)
		for i := 0; i+1 < len(kv); i += 2 {
			if c := sp.moving(strings.TrimPrefix(kv[i], prefix)); c >= 0 {
				page[c] = append(page[c], kv[i], kv[i+1])
				names = append(names, kv[i])
			}
		}
		if len(names) > 0 {
			if err := f(page, names); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

func (sp *splitting) copy(ctx context.Context) error {
	if err := sp.begin(); err != nil {
		return err
	}
	sp.since = map[int]int64{}
	for _, b := range sp.old() {
		first, err := sp.s.c.LIndex(ctx, b.dirty(), 0).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("read %s: %w", b.dirty(), err)
		}
		if ms, err := strconv.ParseInt(strings.TrimPrefix(first, "since "), 10, 64); err == nil {
			sp.since[b.n] = ms
		}
		err = sp.movers(ctx, b.key(), userPrefix, func(page map[int][]any, names []string) error {
			sp.copied(b.key(), names)
			return sp.copyFields(ctx, page, bucket.key, "0")
		})
		if err != nil {
			return err
		}
		if rf, err := sp.s.c.HGet(ctx, b.key(), "rf").Result(); err == nil {
			for _, c := range sp.children(b.n) {
				if err := sp.copyFields(ctx, map[int][]any{c.n: {"rf", rf}}, bucket.key, "0"); err != nil {
					return err
				}
			}
		}
		if err := sp.copyKeys(ctx, b); err != nil {
			return err
		}
		released, err := sp.s.c.SMembers(ctx, b.released()).Result()
		if err != nil {
			return fmt.Errorf("read %s: %w", b.released(), err)
		}
		for _, c := range sp.children(b.n) {
			if err := sp.copyMembers(ctx, c, c.released(), released); err != nil {
				return err
			}
		}
	}
	return nil
}

// copyKeys copies old bucket b's day counts and idempotency records of
// moving users, and its proofs of work spent, into its children: the
// strings a SCAN page at a time (one pipelined read of their values and
// expiries, one copy call a new bucket), since a sale whose claims carry
// keys leaves one a claim.
func (sp *splitting) copyKeys(ctx context.Context, b bucket) error {
	var page []string // idempotency records and proofs found, not yet copied
	err := sp.s.bucketKeys(ctx, b, func(key, suffix string) error {
		kind, name, _ := strings.Cut(suffix, ":")
		if kind != "day" {
			if kind == "idem" {
				if user, _, _ := strings.Cut(name, ":"); sp.moving(user) < 0 {
					return nil
				}
			}
			if page = append(page, key); len(page) == splitChunk {
				err := sp.copyStrings(ctx, b, page)
				page = page[:0]
				return err
			}
			return nil
		}
		ms, err := sp.ttl(ctx, key)
		if err != nil {
			return err
		}
		return sp.movers(ctx, key, "", func(fields map[int][]any, names []string) error {
			sp.copied(key, names)
			return sp.copyFields(ctx, fields, func(c bucket) string { return c.day(name) }, "+"+strconv.FormatInt(ms, 10))
		})
	})
	if err != nil {
		return err
	}
	return sp.copyStrings(ctx, b, page)
}

// ttl is key's expiry in ms; a key without one (or just gone) gets the
// longest any of a bucket keeps.
func (sp *splitting) ttl(ctx context.Context, key string) (int64, error) {
	ttl, err := sp.s.c.PTTL(ctx, key).Result()
	if err != nil {
		return 0, err
	}
	if ms := ttl.Milliseconds(); ms > 0 {
		return ms, nil
	}
	return DayKeyTTL.Milliseconds(), nil
}

// copyStrings copies old bucket b's keys (idempotency records of moving
// users, and proofs), read in Redis, into its children (keyCopies).
func (sp *splitting) copyStrings(ctx context.Context, b bucket, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	since, ok := sp.since[b.n]
	if !ok {
		since = math.MaxInt64 // no dirty list: every record is copied
	}
	read, err := lua.Split.Run(ctx, sp.s.c, append([]string{b.key()}, keys...), "read", sp.n, sp.m, since).Slice()
	if err != nil {
		return fmt.Errorf("read the keys of %s: %w", b.key(), err)
	}
	to := keyCopies{}
	prefix := b.key() + ":"
	for i := 0; i+2 < len(read); i += 3 {
		k, _ := read[i].(string)
		val, _ := read[i+1].(string)
		ms, _ := read[i+2].(int64)
		if ms <= 0 {
			ms = DayKeyTTL.Milliseconds()
		}
		sp.addKey(to, b, strings.TrimPrefix(k, prefix), val, ms)
	}
	return sp.writeKeys(ctx, to)
}

// keyCopies are the keys to write into closed new buckets, by bucket:
// their names, and their values and expiries (ms) as split.lua's copy
// of kind string takes them.
type keyCopies map[int]*struct {
	names []string
	args  []any
}

// addKey adds to to the copies of old bucket b's key suffix ("idem:U:K"
// or "proof:S") of value val, expiring in ms: a record to its user's new
// bucket, naming the partition of its order's stream ("POSITION@P ITEM",
// the record being "POSITION[ ITEM]", admit.lua: its order id is made
// from it), a proof to every child (whoever spent it).
func (sp *splitting) addKey(to keyCopies, b bucket, suffix, val string, ms int64) {
	add := func(c bucket, name, val string) {
		if to[c.n] == nil {
			to[c.n] = &struct {
				names []string
				args  []any
			}{}
		}
		to[c.n].names = append(to[c.n].names, name)
		to[c.n].args = append(to[c.n].args, val, ms)
	}
	kind, name, _ := strings.Cut(suffix, ":")
	if kind == "proof" {
		for _, c := range sp.children(b.n) {
			add(c, ProofKey(c.key(), name), val)
		}
		return
	}
	user, key, _ := strings.Cut(name, ":")
	if pos, item, _ := strings.Cut(val, " "); !strings.Contains(pos, "@") {
		val = pos + "@" + strconv.Itoa(b.p) + " " + item
	}
	c := sp.s.bucketOf(sp.v, sp.moving(user))
	add(c, c.idem(user, key), val)
}

// writeKeys writes to's copies, splitChunk keys a call.
func (sp *splitting) writeKeys(ctx context.Context, to keyCopies) error {
	for n, cp := range to {
		for i := 0; i < len(cp.names); i += splitChunk {
			j := min(i+splitChunk, len(cp.names))
			args := append([]any{"string", 0}, cp.args[2*i:2*j]...)
			if err := sp.run(ctx, "copy", sp.s.bucketOf(sp.v, n), cp.names[i:j], args...); err != nil {
				return err
			}
		}
	}
	return nil
}

// open opens the new buckets, after copying into them again bucket 0's
// settings and changes applied: a change applied while the old buckets
// pre-copied (change.lua) may have come after the create read them, and
// bucket 0, frozen, takes none until it switches.
func (sp *splitting) open(ctx context.Context) error {
	if err := sp.begin(); err != nil {
		return err
	}
	config, changes, err := sp.settings(ctx)
	if err != nil {
		return err
	}
	for c := sp.n; c < sp.m; c++ {
		child := sp.s.bucketOf(sp.v, c)
		if err := sp.run(ctx, "copy", child, []string{child.key()}, append([]any{"fields", "0"}, config...)...); err != nil {
			return err
		}
		if err := sp.copyMembers(ctx, child, child.changes(), changes); err != nil {
			return err
		}
	}
	for c := sp.n; c < sp.m; c++ {
		if err := sp.run(ctx, "open", sp.s.bucketOf(sp.v, c), nil); err != nil {
			return err
		}
	}
	return nil
}

func (sp *splitting) drop(ctx context.Context) error {
	if err := sp.begin(); err != nil {
		return err
	}
	for _, b := range sp.old() {
		if err := sp.s.c.Unlink(ctx, b.dirty()).Err(); err != nil { // freed off Redis's thread
			return fmt.Errorf("drop %s: %w", b.dirty(), err)
		}
	}
	if sp.moved != nil { // this call copied them: the fields it copied, no scan
		for key, names := range sp.moved {
			for i := 0; i < len(names); i += splitChunk {
				if err := sp.s.c.HDel(ctx, key, names[i:min(i+splitChunk, len(names))]...).Err(); err != nil {
					return fmt.Errorf("drop from %s: %w", key, err)
				}
			}
		}
		return nil
	}
	for _, b := range sp.old() {
		err := sp.movers(ctx, b.key(), userPrefix, func(_ map[int][]any, names []string) error {
			return sp.s.c.HDel(ctx, b.key(), names...).Err()
		})
		if err != nil {
			return err
		}
		err = sp.s.bucketKeys(ctx, b, func(key, suffix string) error {
			if !strings.HasPrefix(suffix, "day:") {
				return nil
			}
			return sp.movers(ctx, key, "", func(_ map[int][]any, names []string) error {
				return sp.s.c.HDel(ctx, key, names...).Err()
			})
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (sp *splitting) switchOver(ctx context.Context) error {
	if err := sp.begin(); err != nil {
		return err
	}
	for b := sp.n - 1; b >= 0; b-- { // bucket 0 last: its "M" says the split is done
		if err := sp.run(ctx, "switch", sp.s.bucketOf(sp.v, b), nil, strconv.Itoa(bit(b == 0))); err != nil {
			return err
		}
	}
	sp.s.buckets.Store(sp.v, sp.m)
	sp.switched = time.Now()
	return nil
}

// spread shares the voucher's units evenly over its buckets, so the new
// buckets' next claims need no moves. Until it runs the new buckets are
// dry, and the claims there refill them from the richest (refillAndAdmit),
// which leaves the buckets uneven; a spread that gave each new bucket a
// share of its parent's units regardless left them so. It runs last:
// run before the drop, its moves met the first refills and the split
// row's longest call grew (CHANGELOG.md has the runs).
func (sp *splitting) spread(ctx context.Context) error {
	if err := sp.begin(); err != nil {
		return err
	}
	st, err := sp.s.readStocks(ctx, sp.v, sp.m)
	if err != nil {
		return err
	}
	var total int64
	for _, x := range st.stock {
		total += x
	}
	over := make([]int64, sp.m) // a bucket's units above its share, or below (< 0)
	for b, x := range st.stock {
		over[b] = x - share(total, sp.m, b)
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
		got, err := sp.s.moveUnits(ctx, sp.s.bucketOf(sp.v, from), sp.s.bucketOf(sp.v, to), want)
		if err != nil || got < want { // claims took them meanwhile: even enough
			return err
		}
		over[from] -= got
		over[to] += got
	}
}

// SplitTarget is the number of buckets a hot voucher of n buckets is
// split to: the least multiple of n (at most MaxBuckets) whose buckets'
// slots are on every master of the cluster (or on as many as the
// partitions' slots reach: raise FLASHSALE_STREAM_PARTITIONS to reach
// more), and n itself on one Redis (one thread decides every bucket
// there: a split would add moves and gain nothing) or when n's buckets
// are on as many masters already.
func (s *Store) SplitTarget(ctx context.Context, v int64, n int) (int, error) {
	cc, ok := s.c.(*redis.ClusterClient)
	if !ok {
		return n, nil
	}
	all := map[string]bool{}
	var mu sync.Mutex
	err := cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		all[c.Options().Addr] = true
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("list masters: %w", err)
	}
	// Buckets n apart from the last are in the partitions after it; past
	// every partition they come round again: the least count reaching the
	// most masters the partitions reach.
	seen, b, best, most := map[string]bool{}, 0, n, 0
	for m := n; m <= MaxBuckets && m-n < s.partitions+n; m += n {
		for ; b < m; b++ {
			master, err := cc.MasterForKey(ctx, s.bucketOf(v, b).key())
			if err != nil {
				return 0, fmt.Errorf("master of voucher %d bucket %d: %w", v, b, err)
			}
			seen[master.Options().Addr] = true
		}
		if len(seen) > most {
			best, most = m, len(seen)
		}
		if most >= len(all) {
			break
		}
	}
	return best, nil
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
		m, err := cc.MasterForKey(ctx, s.bucketOf(v, b).key())
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
