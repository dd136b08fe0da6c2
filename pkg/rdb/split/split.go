// Package split raises a voucher's buckets from N to M, a multiple of N, while
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
//	        round while the rounds shrink (calm, rounds): what
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
//	        switched (completeSwitched), every moving user's found by HSCAN; and
//	        the dirty lists
//	spread  the units, shared evenly over the buckets by moves
//	        (take.lua/give.lua): without it the children refill when dry
//	        (a split found switched, by completeSwitched, is not spread)
//
// The moving users wait from freeze to switch: the copy of what they
// wrote during the last catch-up round, not of the bucket, as a live
// migration of a virtual machine copies its memory before it stops it.
// A user's pending orders admitted before stay indexed (o:USER) in the
// old bucket, whose stream holds them: bucket 0 records the counts it had
// (was), and a listing reads the user's bucket at each (rdb.Store.UserPending).
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
// write) ends its catch-up after rounds. Everything else is made
// at once: the releases of the buyers who stay in their bucket, and
// top-ups, pauses, resumes, proof-of-work and access changes while the
// old buckets pre-copy (TestASplittingVoucherReleasesAndChangesWhatItCan).
package split

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
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/internal/keyspace"
)

// Steps are a split's steps, in order (the names BeforeStep's function is given).
var Steps = []string{"precopy", "create", "copy", "catchup", "freeze", "last", "open", "switch", "drop", "spread"}

// ErrRefused refuses a split asked of a voucher that cannot take it (fewer
// buckets than it has, not a multiple of them, above rdb.MaxBuckets, another
// split under way, or Redis does not hold it).
var ErrRefused = errors.New("split refused")

// settingFields are bucket 0's fields a new bucket copies: the voucher's
// settings and the changes applied to them (change.lua).
var settingFields = []string{"limit", "daily", "start_ms", "end_ms", "expire_s", "pool", "closed", "paused", "draw",
	"pow", "access", "room", "room_pre_ms", "room_pass_ms", "end_change", "pause_change", "pow_change",
	"room_change", "access_change"}

// chunk bounds the fields or members one copy call carries,
// scanCount the fields an HSCAN of a bucket reads a call (COUNT): a
// bucket of a million buyers is read in 200 calls and written in 400;
// and logPage the entries of a dirty list one LRANGE reads.
const (
	chunk     = 2500
	scanCount = 5000
	logPage   = 10000
)

// The catch-up rounds before the freeze: they end when a round copied at
// most calm records (one copy call a new bucket: the freeze then
// holds the moving users for about one), when a round copied more than
// nine tenths of the one before (copying no faster than they are written:
// more rounds would not shorten the freeze), or after rounds.
const (
	calm   = chunk
	rounds = 16
)

// Splitter splits vouchers' buckets in the Redis of a Store.
type Splitter struct {
	store *rdb.Store
	// beforeStep, when set (tests: BeforeStep), runs before each step of
	// a split; an error stops the split there, as a kill of its process
	// would.
	beforeStep func(step string) error
}

// New returns a Splitter over s.
func New(s *rdb.Store) *Splitter {
	return &Splitter{store: s}
}

// BeforeStep returns a copy of the Splitter that runs f before each step
// of a split (Steps): an error stops the split there, as a kill of its
// process would. Tests use it to stop a split at each step.
func (s *Splitter) BeforeStep(f func(step string) error) *Splitter {
	c := *s
	c.beforeStep = f
	return &c
}

// bucket is where one bucket of a voucher lives.
type bucket = keyspace.Bucket

func (s *Splitter) bucketOf(v int64, n int) bucket {
	return keyspace.BucketOf(s.store.Partitions(), v, n)
}

// switchArg is split.lua's switch argument for old bucket b: "1" for
// bucket 0, which records the split done.
func switchArg(b int) string {
	if b == 0 {
		return "1"
	}
	return "0"
}

// Split raises voucher v's buckets to to (a multiple of its number now, at
// most rdb.MaxBuckets) while its sale runs, or completes a split to to that
// was under way; a voucher that has to buckets already is left as it is.
// The reaper runs it (pkg/reaper's splitter); any number of callers may,
// at once or one after a crash of another. It returns what this call
// spent, an error's included.
func (s *Splitter) Split(ctx context.Context, v int64, to int) (Times, error) {
	b0 := s.bucketOf(v, 0)
	raw, err := s.store.Client().HMGet(ctx, b0.Key(), "buckets", "stock").Result()
	if err != nil {
		return Times{}, fmt.Errorf("split voucher %d: %w", v, err)
	}
	if raw[1] == nil {
		return Times{}, fmt.Errorf("split voucher %d: not in Redis: %w", v, ErrRefused)
	}
	str, _ := raw[0].(string)
	l, err := keyspace.ParseLayout(str)
	switch {
	case err != nil:
		return Times{}, fmt.Errorf("split voucher %d: %w", v, err)
	case l.To == 0 && l.N == to:
		return s.completeSwitched(ctx, v, to)
	case l.To != 0 && l.To != to:
		return Times{}, fmt.Errorf("split voucher %d to %d: splitting to %d already: %w", v, to, l.To, ErrRefused)
	case to > keyspace.MaxBuckets || to < l.N || to%l.N != 0:
		return Times{}, fmt.Errorf("split voucher %d from %d to %d buckets: %w", v, l.N, to, ErrRefused)
	}
	sp := splitting{s: s, c: s.store.Client(), v: v, n: l.N, m: to}
	for _, step := range []func(context.Context) error{sp.precopy, sp.create, sp.copy, sp.catchup, sp.freeze, sp.last, sp.open, sp.switchOver, sp.drop, sp.spread} {
		if err := step(ctx); err != nil {
			return sp.times(), fmt.Errorf("split voucher %d from %d to %d buckets: %w", v, l.N, to, err)
		}
	}
	return sp.times(), nil
}

// Times is what one call of Split spent: how long it kept the moving
// users waiting (Paused: from the start of its freeze to the end of its
// switch; 0 when it found them switched), and each step it began, in
// order, with its time (the reaper logs them).
type Times struct {
	Paused time.Duration
	Steps  []Step
}

// begunStep is a step a call of Split began, and when.
type begunStep struct {
	name string
	at   time.Time
}

// Step is a step of Steps and how long a call of Split spent
// on it.
type Step struct {
	Name string
	Took time.Duration
}

// completeSwitched completes a split of voucher v to to whose buckets all took
// to (switch): the moving users' counts are dropped from the old buckets
// (again: a split killed during its drop left some), whose number bucket
// 0 recorded last in was. A voucher never split has nothing to drop.
func (s *Splitter) completeSwitched(ctx context.Context, v int64, to int) (Times, error) {
	was, err := s.store.Client().HGet(ctx, s.bucketOf(v, 0).Key(), "was").Result()
	if errors.Is(err, redis.Nil) {
		return Times{}, nil
	} else if err != nil {
		return Times{}, fmt.Errorf("split voucher %d: %w", v, err)
	}
	fs := strings.Fields(was)
	if len(fs) == 0 {
		return Times{}, nil
	}
	n, err := strconv.Atoi(fs[len(fs)-1])
	if err != nil || n < 1 || to%n != 0 {
		return Times{}, fmt.Errorf("split voucher %d: bad was %q", v, was)
	}
	sp := splitting{s: s, c: s.store.Client(), v: v, n: n, m: to, step: slices.Index(Steps, "drop")}
	err = sp.drop(ctx)
	return sp.times(), err
}

// splitting is one split of voucher v from n to m buckets.
type splitting struct {
	s    *Splitter
	c    redis.UniversalClient // s's Redis
	v    int64
	n, m int
	step int // the next of Steps
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
func (sp *splitting) times() Times {
	t := Times{Steps: make([]Step, len(sp.begun))}
	now := time.Now()
	for i, st := range sp.begun {
		end := now
		if i+1 < len(sp.begun) {
			end = sp.begun[i+1].at
		}
		t.Steps[i] = Step{Name: st.name, Took: end.Sub(st.at)}
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
	err := lua.Split.Run(ctx, sp.c, append([]string{b.Key()}, keys...),
		append([]any{step, sp.n, sp.m}, args...)...).Err()
	if err != nil {
		return fmt.Errorf("%s %s: %w", step, b.Key(), err)
	}
	return nil
}

// begin marks the start of the next step, where a test's hook may stop
// the split as a kill would.
func (sp *splitting) begin() error {
	name := Steps[sp.step]
	sp.step++
	sp.begun = append(sp.begun, begunStep{name, time.Now()})
	if sp.s.beforeStep != nil {
		return sp.s.beforeStep(name)
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
	if b := keyspace.UserBucket(user, sp.m); b >= sp.n {
		return b
	}
	return -1
}

func (sp *splitting) precopy(ctx context.Context) error {
	if err := sp.begin(); err != nil {
		return err
	}
	for _, b := range sp.old() { // bucket 0 first: it refuses changes from then on
		if err := sp.run(ctx, "precopy", b, []string{b.Dirty(), b.Stream()}); err != nil {
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
	for range rounds {
		n, err := sp.recopy(ctx)
		if err != nil {
			return err
		}
		if n <= calm || (prev >= 0 && n*10 > prev*9) {
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
		end, err := sp.c.LLen(ctx, b.Dirty()).Result()
		if err != nil {
			return read, fmt.Errorf("read %s: %w", b.Dirty(), err)
		}
		for from := sp.logged[b.N]; from < end; from = sp.logged[b.N] {
			page, err := sp.c.LRange(ctx, b.Dirty(), from, min(from+logPage, end)-1).Result()
			if err != nil {
				return read, fmt.Errorf("read %s: %w", b.Dirty(), err)
			}
			if len(page) == 0 { // gone: expired with its voucher
				break
			}
			if err := sp.copyNamed(ctx, b, page); err != nil {
				return read, err
			}
			sp.logged[b.N] += int64(len(page))
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
		case strings.HasPrefix(e, keyspace.UserPrefix):
			c := sp.moving(strings.TrimPrefix(rest, keyspace.UserPrefix))
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
	if err := sp.copyFields(ctx, counts, bucket.Key, "0"); err != nil {
		return err
	}
	sp.copied(b.Key(), names)
	for day, fields := range days {
		ms, err := sp.ttl(ctx, b.Day(day))
		if err != nil {
			return err
		}
		if err := sp.copyFields(ctx, fields, func(c bucket) string { return c.Day(day) }, "+"+strconv.FormatInt(ms, 10)); err != nil {
			return err
		}
		sp.copied(b.Day(day), dayNames[day])
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
	return sp.configure(ctx, func(child bucket, config []any) error {
		return sp.run(ctx, "create", child, nil, config...)
	})
}

// configure reads bucket 0's settings and changes applied, and writes
// them into each new bucket: the settings by write, the changes by a
// copy.
func (sp *splitting) configure(ctx context.Context, write func(child bucket, config []any) error) error {
	config, changes, err := sp.settings(ctx)
	if err != nil {
		return err
	}
	for c := sp.n; c < sp.m; c++ {
		child := sp.s.bucketOf(sp.v, c)
		if err := write(child, config); err != nil {
			return err
		}
		if err := sp.copyMembers(ctx, child, child.Changes(), changes); err != nil {
			return err
		}
	}
	return nil
}

// settings reads bucket 0's settings (settingFields, as field,
// value pairs) and the ids of the changes applied to it, and notes when
// the voucher's keys expire (expireS).
func (sp *splitting) settings(ctx context.Context) (config []any, changes []string, err error) {
	b0 := sp.s.bucketOf(sp.v, 0)
	vals, err := sp.c.HMGet(ctx, b0.Key(), settingFields...).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("read settings: %w", err)
	}
	for i, f := range settingFields {
		if str, ok := vals[i].(string); ok {
			config = append(config, f, str)
		}
	}
	str, _ := vals[slices.Index(settingFields, "expire_s")].(string)
	sp.expireS = cmp.Or(str, "0")
	changes, err = sp.c.SMembers(ctx, b0.Changes()).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("read changes applied: %w", err)
	}
	return config, changes, nil
}

// copyMembers adds members to set key of closed new bucket child.
func (sp *splitting) copyMembers(ctx context.Context, child bucket, key string, members []string) error {
	for i := 0; i < len(members); i += chunk {
		args := []any{"set", sp.expireS}
		for _, m := range members[i:min(i+chunk, len(members))] {
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
		for i := 0; i < len(pairs); i += 2 * chunk {
			args := append([]any{"most", expire}, pairs[i:min(i+2*chunk, len(pairs))]...)
			if err := sp.run(ctx, "copy", child, []string{keyOf(child)}, args...); err != nil {
				return err
			}
		}
	}
	return nil
}

// node is the client of the node holding key: a cluster's master of its
// slot, which alone can SCAN for the keys of that slot.
func (s *Splitter) node(ctx context.Context, key string) (redis.Cmdable, error) {
	if cc, ok := s.store.Client().(*redis.ClusterClient); ok {
		return cc.MasterForKey(ctx, key)
	}
	return s.store.Client(), nil
}

// bucketKeys calls f with each key of bucket b's own named by suffix
// (day:, idem:, proof:), found by SCAN on b's node.
func (s *Splitter) bucketKeys(ctx context.Context, b bucket, f func(key, suffix string) error) error {
	c, err := s.node(ctx, b.Key())
	if err != nil {
		return err
	}
	prefix := b.Key() + ":"
	it := c.Scan(ctx, 0, prefix+"*", scanCount).Iterator()
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
		kv, next, err := sp.c.HScan(ctx, key, cursor, prefix+"*", scanCount).Result()
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
		first, err := sp.c.LIndex(ctx, b.Dirty(), 0).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("read %s: %w", b.Dirty(), err)
		}
		if ms, err := strconv.ParseInt(strings.TrimPrefix(first, "since "), 10, 64); err == nil {
			sp.since[b.N] = ms
		}
		err = sp.movers(ctx, b.Key(), keyspace.UserPrefix, func(page map[int][]any, names []string) error {
			sp.copied(b.Key(), names)
			return sp.copyFields(ctx, page, bucket.Key, "0")
		})
		if err != nil {
			return err
		}
		if rf, err := sp.c.HGet(ctx, b.Key(), "rf").Result(); err == nil {
			for _, c := range sp.children(b.N) {
				if err := sp.copyFields(ctx, map[int][]any{c.N: {"rf", rf}}, bucket.Key, "0"); err != nil {
					return err
				}
			}
		}
		if err := sp.copyKeys(ctx, b); err != nil {
			return err
		}
		released, err := sp.c.SMembers(ctx, b.Released()).Result()
		if err != nil {
			return fmt.Errorf("read %s: %w", b.Released(), err)
		}
		for _, c := range sp.children(b.N) {
			if err := sp.copyMembers(ctx, c, c.Released(), released); err != nil {
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
			if page = append(page, key); len(page) == chunk {
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
			return sp.copyFields(ctx, fields, func(c bucket) string { return c.Day(name) }, "+"+strconv.FormatInt(ms, 10))
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
	ttl, err := sp.c.PTTL(ctx, key).Result()
	if err != nil {
		return 0, err
	}
	if ms := ttl.Milliseconds(); ms > 0 {
		return ms, nil
	}
	return rdb.DayKeyTTL.Milliseconds(), nil
}

// copyStrings copies old bucket b's keys (idempotency records of moving
// users, and proofs), read in Redis, into its children (keyCopies).
func (sp *splitting) copyStrings(ctx context.Context, b bucket, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	since, ok := sp.since[b.N]
	if !ok {
		since = math.MaxInt64 // no dirty list: every record is copied
	}
	read, err := lua.Split.Run(ctx, sp.c, append([]string{b.Key()}, keys...), "read", sp.n, sp.m, since).Slice()
	if err != nil {
		return fmt.Errorf("read the keys of %s: %w", b.Key(), err)
	}
	to := keyCopies{}
	prefix := b.Key() + ":"
	for i := 0; i+2 < len(read); i += 3 {
		k, _ := read[i].(string)
		val, _ := read[i+1].(string)
		ms, _ := read[i+2].(int64)
		if ms <= 0 {
			ms = rdb.DayKeyTTL.Milliseconds()
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
		if to[c.N] == nil {
			to[c.N] = &struct {
				names []string
				args  []any
			}{}
		}
		to[c.N].names = append(to[c.N].names, name)
		to[c.N].args = append(to[c.N].args, val, ms)
	}
	kind, name, _ := strings.Cut(suffix, ":")
	if kind == "proof" {
		for _, c := range sp.children(b.N) {
			add(c, keyspace.ProofKey(c.Key(), name), val)
		}
		return
	}
	user, key, _ := strings.Cut(name, ":")
	if pos, item, _ := strings.Cut(val, " "); !strings.Contains(pos, "@") {
		val = pos + "@" + strconv.Itoa(b.P) + " " + item
	}
	c := sp.s.bucketOf(sp.v, sp.moving(user))
	add(c, c.Idem(user, key), val)
}

// writeKeys writes to's copies, chunk keys a call.
func (sp *splitting) writeKeys(ctx context.Context, to keyCopies) error {
	for n, cp := range to {
		for i := 0; i < len(cp.names); i += chunk {
			j := min(i+chunk, len(cp.names))
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
	err := sp.configure(ctx, func(child bucket, config []any) error {
		return sp.run(ctx, "copy", child, []string{child.Key()}, append([]any{"fields", "0"}, config...)...)
	})
	if err != nil {
		return err
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
		if err := sp.c.Unlink(ctx, b.Dirty()).Err(); err != nil { // freed off Redis's thread
			return fmt.Errorf("drop %s: %w", b.Dirty(), err)
		}
	}
	if sp.moved != nil { // this call copied them: the fields it copied, no scan
		for key, names := range sp.moved {
			for i := 0; i < len(names); i += chunk {
				if err := sp.c.HDel(ctx, key, names[i:min(i+chunk, len(names))]...).Err(); err != nil {
					return fmt.Errorf("drop from %s: %w", key, err)
				}
			}
		}
		return nil
	}
	for _, b := range sp.old() {
		err := sp.movers(ctx, b.Key(), keyspace.UserPrefix, func(_ map[int][]any, names []string) error {
			return sp.c.HDel(ctx, b.Key(), names...).Err()
		})
		if err != nil {
			return err
		}
		err = sp.s.bucketKeys(ctx, b, func(key, suffix string) error {
			if !strings.HasPrefix(suffix, "day:") {
				return nil
			}
			return sp.movers(ctx, key, "", func(_ map[int][]any, names []string) error {
				return sp.c.HDel(ctx, key, names...).Err()
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
		if err := sp.run(ctx, "switch", sp.s.bucketOf(sp.v, b), nil, switchArg(b)); err != nil {
			return err
		}
	}
	sp.switched = time.Now()
	return nil
}

// spread shares the voucher's units evenly over its buckets, so the new
// buckets' next claims need no moves. Until it runs the new buckets are
// dry, and the claims there refill them from the richest (rdb's dry-bucket detour),
// which leaves the buckets uneven; a spread that gave each new bucket a
// share of its parent's units regardless left them so. It runs last:
// run before the drop, its moves met the first refills and the split
// row's longest call grew (CHANGELOG.md has the runs).
func (sp *splitting) spread(ctx context.Context) error {
	if err := sp.begin(); err != nil {
		return err
	}
	return sp.s.store.ShareEvenly(ctx, sp.v)
}

// Target is the number of buckets a hot voucher of n buckets is
// split to: the least multiple of n (at most rdb.MaxBuckets) whose buckets'
// slots are on every master of the cluster (or on as many as the
// partitions' slots reach: raise FLASHSALE_STREAM_PARTITIONS to reach
// more), and n itself on one Redis (one thread decides every bucket
// there: a split would add moves and gain nothing) or when n's buckets
// are on as many masters already.
func (s *Splitter) Target(ctx context.Context, v int64, n int) (int, error) {
	cc, ok := s.store.Client().(*redis.ClusterClient)
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
	for m := n; m <= keyspace.MaxBuckets && m-n < s.store.Partitions()+n; m += n {
		for ; b < m; b++ {
			master, err := cc.MasterForKey(ctx, s.bucketOf(v, b).Key())
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
