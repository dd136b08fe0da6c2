package admission

// Admission: claims decided by admit.lua, pipelined and batched per
// bucket (a claim decided again off that path is detour.go's).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/lua"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/internal/keyspace"
)

// An Admitter decides claims over a Store: each claim a line of one call
// of admit.lua, the claims of a bucket in one call, the calls of a round
// trip pipelined (admit.go); concurrent claims coalesced into round trips
// (batcher.go); a claim decided again off that path (detour.go); the
// outcome of a claim its caller stopped waiting for, recorded (outcome.go).
// It keeps what only the claim's path keeps; what every client of the
// Store shares (the voucher's buckets, the durability) is the Store's.
type Admitter struct {
	s *rdb.Store
	// c is the Store's client; ac, when not nil, is the client
	// admissions are sent on (New).
	c, ac      redis.UniversalClient
	partitions int
	// admitKeys are each partition's StreamKey, LoadedKey and BacklogKey,
	// boxed once, as every admission call sends them.
	admitKeys [][3]any
	// horizon is the last call's horizon, boxed (horizonArg).
	horizon atomic.Pointer[boxedHorizon]
	// callKeys are the admission calls' keys by bucket (callKeysOf): a
	// map under a lock, as a sync.Map would box the bucket of each
	// lookup, an allocation a call.
	callKeysMu sync.RWMutex
	callKeys   map[bucket]*callKeys
	// dry is each hot voucher's refills: voucher id -> *dryVoucher
	// (detour.go).
	dry     sync.Map
	signals testSignals
}

// New returns the Admitter of s's claims. A process has one for each
// Store: its caches and a hot voucher's refills are its own.
//
// ac, when not nil, is the client admissions are sent on: a client of the
// same Redis whose read timeout is as long as a claim's outcome is
// listened for (the gateway's FLASHSALE_CLAIM_OUTCOME_TIMEOUT; a batcher's
// round trip has no deadline of its own). The Store's own client gives up
// on a reply after its read timeout, and closes the connection, losing
// the reply of a script that may have run.
func New(s *rdb.Store, ac redis.UniversalClient) *Admitter {
	adm := &Admitter{s: s, c: s.Client(), ac: ac, partitions: s.Partitions(), admitKeys: make([][3]any, s.Partitions()),
		callKeys: map[bucket]*callKeys{}}
	for p := range adm.admitKeys {
		adm.admitKeys[p] = [3]any{rdb.StreamKey(p), rdb.LoadedKey(p), rdb.BacklogKey(p)}
	}
	return adm
}

// bucket is a voucher's bucket and its keys.
type bucket = keyspace.Bucket

// bucketOf is bucket n of voucher v.
func (adm *Admitter) bucketOf(v int64, n int) bucket { return keyspace.BucketOf(adm.partitions, v, n) }

// userBucketOf is the bucket of voucher v (of n buckets) that decides
// user's claims (rdb.UserBucket).
func (adm *Admitter) userBucketOf(v int64, user string, n int) bucket {
	return adm.bucketOf(v, keyspace.UserBucket(user, n))
}

// testSignals are the points of the claim's path where its tests act
// (export_test.go sets them; nil in production, each is skipped). The
// Admitter waits while the test acts.
type testSignals struct {
	// refill: a refill of a dry bucket starts, before its read of the
	// buckets' stocks.
	refill func()
}

// cutAdmissions closes the admission client, if adm has one: its
// round trips in flight end at once (Batcher.CloseBy).
func (adm *Admitter) cutAdmissions() {
	if adm.ac != nil {
		_ = adm.ac.Close()
	}
}

func (adm *Admitter) admitClient() redis.UniversalClient {
	if adm.ac != nil {
		return adm.ac
	}
	return adm.c
}

// Claim is one user's request for Quantity units (or one item, or one
// draw entry) of a voucher.
type Claim struct {
	VoucherID int64
	UserID    string
	// IdempotencyKey, when set, makes a repeated claim return the first
	// admission instead of taking another unit.
	IdempotencyKey string
	IdempotencyTTL time.Duration
	Now            time.Time
	// Serial tells the claim from the buyer's other claims of the same
	// millisecond (NewSerial): the order an unkeyed claim makes carries
	// it, so its outcome is found by it (a keyed claim's, by its key).
	// Zero: none.
	Serial uint64
	// Horizon is the last time, by Redis's clock, the claim may take
	// anything: a call that reaches Redis later (held in a network, or
	// in a kernel's send queue past its gateway's give-up) is refused
	// with ErrPastHorizon, nothing taken. Zero: none.
	Horizon time.Time
	// Day is order.Day(Now, sale time zone): the unit of the daily limit.
	Day string
	// Quantity is the units claimed, all or nothing (0 means 1).
	Quantity int64
	// Proof is the claim's verified proof of work (pkg/proof); zero: none.
	Proof rdb.Proof
	// Pass is the claim's waiting-room pass as the gateway verified it
	// (pkg/room): "PLACE:EXP_MS"; "": none.
	Pass string
	// Access is the claim's access code (pkg/access) as the caller
	// verified it.
	Access rdb.AccessCode
}

// Admission is an admitted claim.
type Admission struct {
	OrderID int64
	// Replayed: an earlier admission under the same idempotency key.
	Replayed bool
	// Item is what the order took of a pooled voucher (zero for units).
	Item order.Item
	// Entry: an entry of a draw sale; OrderID is its entry id.
	Entry bool
}

// Admit runs the admission script for c. Rejections are the Err* sentinels.
func (adm *Admitter) Admit(ctx context.Context, c Claim) (Admission, error) {
	out, errs, err := adm.AdmitMany(ctx, []Claim{c})
	if err != nil {
		return Admission{}, err
	}
	return out[0], errs[0]
}

// Replay returns the admission claim c's idempotency key was first given
// (ok false: none, or c has no key): the answer to a keyed retry that the
// gateway's own checks would refuse now (its pass lapsed since, its proof
// expired), which must get its first admission again, as the script would
// give it.
func (adm *Admitter) Replay(ctx context.Context, c Claim) (a Admission, ok bool, err error) {
	if c.IdempotencyKey == "" {
		return Admission{}, false, nil
	}
	b := adm.userBucketOf(c.VoucherID, c.UserID, adm.s.KnownBuckets(c.VoucherID))
	pipe := adm.c.Pipeline()
	get := pipe.Get(ctx, b.Idem(c.UserID, c.IdempotencyKey))
	draw := pipe.HGet(ctx, b.Key(), "draw") // a draw's admission is an entry
	_, err = pipe.Exec(ctx)
	rec, gerr := get.Result()
	switch {
	case errors.Is(gerr, redis.Nil):
		return Admission{}, false, nil
	case err != nil && !errors.Is(err, redis.Nil):
		return Admission{}, false, fmt.Errorf("replay: %w", err)
	}
	pos, item, _ := strings.Cut(rec, " ") // the record: "POSITION[ ITEM]"
	if a, err = admissionAt(pos, b.P, item); err != nil {
		return Admission{}, false, err
	}
	a.Replayed, a.Entry = true, draw.Val() == "1"
	if err := adm.s.WaitWritten(ctx, b.P); err != nil { // as a replay by the script waits
		return Admission{}, false, err
	}
	return a, true, nil
}

// AdmitMany runs the admission script for every claim in one pipelined
// round trip (EVALSHA each; a script Redis lost, after a restart, is loaded
// again and those claims run once more: NOSCRIPT means they did not run).
// A claim that takes a detour (detour.go) is decided again after the
// round trip. Results and errors align with claims; the error
// return is the round trip's own.
func (adm *Admitter) AdmitMany(ctx context.Context, claims []Claim) ([]Admission, []error, error) {
	out, errs, err := adm.admitBatch(ctx, claims)
	if err != nil {
		return out, errs, err
	}
	adm.detourAll(ctx, claims, out, errs)
	return out, errs, nil
}

// admitBatch is one pipelined round trip of admissions, and another for
// the claims that must run again: NOSCRIPT, or routed by the wrong number
// of buckets. The claims of one bucket travel as one call of admit.lua,
// which decides them in order (admitCalls).
func (adm *Admitter) admitBatch(ctx context.Context, claims []Claim) ([]Admission, []error, error) {
	out, errs := make([]Admission, len(claims)), make([]error, len(claims))
	pending := make([]int, 0, len(claims))
	for i, c := range claims {
		if !sendable(c) {
			errs[i] = fmt.Errorf("admit: user %q, pass %q: %w", c.UserID, c.Pass, ErrUnsendable)
			continue
		}
		pending = append(pending, i)
	}
	for round := 0; round < 3 && len(pending) > 0; round++ {
		calls := adm.admitCalls(claims, pending)
		// Made here, filled by send: small, they stay on the stack.
		rt := roundTrip{cmds: make([]*redis.Cmd, len(calls)), broken: make([]error, len(calls)), unreplicated: make([]error, len(calls))}
		err := adm.send(ctx, calls, rt)
		if err != nil { // nothing of this round was decided
			if round == 0 {
				return out, errs, err
			}
			for _, i := range pending { // the others were decided in an earlier round
				errs[i] = err
			}
			return out, errs, nil
		}
		again, reload := adm.read(ctx, claims, calls, rt, out, errs)
		if reload {
			if err := lua.Admit.Load(ctx, adm.c).Err(); err != nil {
				// The claims to run again did not run (NOSCRIPT); the
				// others keep their answers.
				for _, i := range again {
					errs[i] = fmt.Errorf("reload admit script: %w: %w", ErrNotSent, err)
				}
				return out, errs, nil
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

// roundTrip is what sending a round's calls gave, by call: its command,
// the error of a call whose pipeline broke (its claims' answer), and of
// one admitted on a master but not known to survive it (durability.go).
type roundTrip struct {
	cmds                 []*redis.Cmd
	broken, unreplicated []error
}

// send sends calls, one pipeline for each group of them that waits for
// its replicas together (admitGroups), into rt (made for calls). An
// error when nothing was decided: no pipeline could be had, or the only
// one broke.
func (adm *Admitter) send(ctx context.Context, calls []admitCall, rt roundTrip) error {
	parts := make([]int, len(calls))
	for j, c := range calls {
		parts[j] = c.b.P
	}
	groups, err := adm.admitGroups(ctx, parts)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	for _, g := range groups {
		for _, j := range g.js {
			rt.cmds[j] = calls[j].cmd(ctx, adm)
			_ = g.pipe.Process(ctx, sentOnce{rt.cmds[j]}) // queues it: the error is Exec's
		}
		wait := adm.s.QueueWait(ctx, g.pipe)
		_, err := g.pipe.Exec(ctx)
		if err != nil && !isReplyError(rt.cmds, g.js) {
			err = pipelineError(err)
			if len(groups) == 1 {
				return err
			}
			for _, j := range g.js {
				rt.broken[j] = err
			}
			continue
		}
		if werr := adm.s.Replicated(wait); werr != nil {
			for _, j := range g.js {
				rt.unreplicated[j] = werr
			}
		}
	}
	return nil
}

// read answers, in out and errs, the claims of calls by their replies in
// rt. again are the claims to run in another round: those of a call Redis
// had no script for (reload: load it first), and those routed by the
// wrong number of buckets (now known).
func (adm *Admitter) read(ctx context.Context, claims []Claim, calls []admitCall, rt roundTrip, out []Admission, errs []error) (again []int, reload bool) {
	var replays map[int][]int // partition -> replayed claims, when waiting for replicas
	if adm.s.Durability().Waits() {
		replays = map[int][]int{}
	}
	for j, c := range calls {
		replies, err := rt.replies(j, len(c.claims))
		switch {
		case err != nil && redis.HasErrorPrefix(err, "NOSCRIPT"):
			again, reload = append(again, c.claims...), true
			continue
		case err != nil:
			for _, i := range c.claims {
				errs[i] = err
			}
			continue
		}
		for k, i := range c.claims {
			if n, ok := rerouted(replies[k]); ok {
				if n < 1 || n > rdb.MaxBuckets {
					errs[i] = fmt.Errorf("admit: voucher %d has %d buckets", claims[i].VoucherID, n)
					continue
				}
				adm.s.LearnBuckets(claims[i].VoucherID, int(n))
				again = append(again, i)
				continue
			}
			out[i], errs[i] = admission(replies[k], c.b.P)
			if errs[i] == nil && rt.unreplicated[j] != nil {
				errs[i] = rt.unreplicated[j] // admitted on the master, not known to survive it
			}
			if errs[i] == nil && out[i].Replayed && replays != nil {
				replays[c.b.P] = append(replays[c.b.P], i)
			}
		}
	}
	// A replay's first admission was written on another connection,
	// which this round's WAIT does not cover: one wait per partition
	// holding replays covers them all.
	for p, is := range replays {
		if err := adm.s.WaitWritten(ctx, p); err != nil {
			for _, i := range is {
				errs[i] = err
			}
		}
	}
	return again, reload
}

// replies is call j's replies, one per claim of its n; the error its
// claims are answered otherwise (a NOSCRIPT one as Redis gave it).
func (rt roundTrip) replies(j, n int) ([]any, error) {
	if rt.broken[j] != nil {
		return nil, rt.broken[j]
	}
	replies, err := rt.cmds[j].Slice()
	switch {
	case err != nil && redis.HasErrorPrefix(err, "NOSCRIPT"):
		return nil, err
	case err == nil && len(replies) != n:
		err = fmt.Errorf("%d replies to %d claims", len(replies), n)
	}
	if err != nil {
		return nil, fmt.Errorf("admit: %w", err)
	}
	return replies, nil
}

// rerouted reads a reply that says the claim was routed by the wrong
// number of buckets ({10, n}): n is the voucher's number now.
func rerouted(reply any) (n int64, ok bool) {
	res, _ := reply.([]any)
	if len(res) != 2 || res[0] != int64(10) {
		return 0, false
	}
	n, _ = res[1].(int64)
	return n, true
}

// admitCall is one call of admit.lua: the claims (their indexes, in the
// batch's order) of one bucket, in the script's wire form (admit.lua's
// header): what the call's claims share is sent once, and each claim is
// one line of one argument, its fields after the last that differs from
// its default left out, so a common claim is its user alone. A claim
// names a key of its own only for an idempotency record or a proof.
type admitCall struct {
	b       bucket
	keys    *callKeys
	n       int // the voucher's buckets, as the call was routed
	claims  []int
	base    int64    // the call's time, unix ms: ARGV[4]
	lines   []byte   // ARGV[5]: a line per claim
	horizon int64    // ARGV[6]: the earliest of its claims' horizons, unix ms (0: none)
	days    []string // the days of the claims, in order of first use
	named   []any    // the keys claims name (idempotency records, proofs)
}

// The fields of a claim's line in admit.lua's ARGV[5], in order.
const (
	lineUser = iota
	lineSerial
	lineDT
	lineQty
	lineDay
	lineAccess
	linePass
	lineIdem
	lineIdemTTL
	lineProof
	lineProofMax
	lineProofTTL
)

// claimLine names the fields of a claim's line; admit.lua's header lists
// the same names in the same order (a test holds the two together).
var claimLine = [...]string{lineUser: "USER", lineSerial: "SERIAL", lineDT: "DT", lineQty: "QTY", lineDay: "DAY", lineAccess: "ACCESS",
	linePass: "PASS", lineIdem: "IDEM", lineIdemTTL: "IDEM_TTL", lineProof: "PROOF", lineProofMax: "PROOF_MAX", lineProofTTL: "PROOF_TTL"}

// sentOnce is an admission call go-redis must never send again by
// itself: a cluster client resends a pipeline whose reply timed out or
// whose connection broke (up to MaxRedirects times, the same budget as its
// MOVED redirects), and a call Redis ran whose reply was lost would run
// twice — a second unit taken, or a refusal (the limit, a dial refused on
// the retry) answered for a claim admitted. Its round trip's error is
// answered instead (outcome_unknown once sent). MOVED and ASK are still
// followed: Redis ran nothing then.
type sentOnce struct{ *redis.Cmd }

func (sentOnce) NoRetry() bool { return true }

// cmd is the call as the EVALSHA command go-redis sends (as
// redis.Script.EvalSha makes it, without boxing the keys one by one).
func (c *admitCall) cmd(ctx context.Context, adm *Admitter) *redis.Cmd {
	cmd := redis.NewCmd(ctx, c.evalsha(adm)...)
	cmd.SetFirstKeyPos(3)
	return cmd
}

// evalsha is the call's EVALSHA command: the script's SHA, the number of
// keys, the keys and the arguments.
func (c *admitCall) evalsha(adm *Admitter) []any {
	part := adm.admitKeys[c.b.P]
	nkeys := 6 + len(c.days) + len(c.named)
	a := make([]any, 0, 3+nkeys+6+len(c.days))
	a = append(a, "evalsha", admitSha, nkeys, c.keys.key, part[0], c.keys.pool, part[1], part[2], c.keys.dirty)
	for _, d := range c.days {
		a = append(a, keyspace.DayKey(c.keys.name, d))
	}
	a = append(a, c.named...)
	a = append(a, c.keys.vid, c.n, dayTTLArg, c.base, c.lines, adm.horizonArg(c.horizon))
	for _, d := range c.days {
		a = append(a, d)
	}
	return a
}

// AdmissionCall is what one call of admit.lua deciding claims (of one
// voucher bucket, as routed now) sends after the script's SHA: the number
// of keys, the keys and the arguments. make bench sends it to a script
// that does nothing, for the floor of a call.
func (adm *Admitter) AdmissionCall(claims []Claim) []any {
	pending := make([]int, len(claims))
	for i := range pending {
		pending[i] = i
	}
	calls := adm.admitCalls(claims, pending)
	return calls[0].evalsha(adm)[2:]
}

// callKeys are what every admission call of a bucket sends alike, boxed
// once for the process (boxing a string or an int64 allocates): the
// bucket's keys (KEYS[1], KEYS[3], KEYS[6]) and its voucher id (ARGV[1]);
// name is KEYS[1] as a string, the prefix of the call's other keys.
type callKeys struct {
	name                  string
	key, pool, dirty, vid any
}

// maxCallKeys bounds the buckets whose callKeys a process keeps: past it
// they are forgotten and built again as calls need them.
const maxCallKeys = 1 << 14

// callKeysOf returns bucket b's callKeys.
func (adm *Admitter) callKeysOf(b bucket) *callKeys {
	adm.callKeysMu.RLock()
	k := adm.callKeys[b]
	adm.callKeysMu.RUnlock()
	if k != nil {
		return k
	}
	name := b.Key()
	k = &callKeys{name: name, key: name, pool: keyspace.PoolKey(name), dirty: b.Dirty(), vid: b.V}
	adm.callKeysMu.Lock()
	if len(adm.callKeys) >= maxCallKeys {
		clear(adm.callKeys)
	}
	adm.callKeys[b] = k
	adm.callKeysMu.Unlock()
	return k
}

// horizonArg is horizon (unix ms) boxed as the call's ARGV[6]: once for
// all the calls that share it, as the gateway's horizons are whole
// seconds (HorizonAfter), so a call's costs no allocation.
func (adm *Admitter) horizonArg(horizon int64) any {
	if horizon == 0 {
		return horizon
	}
	if b := adm.horizon.Load(); b != nil && b.ms == horizon {
		return b.arg
	}
	b := &boxedHorizon{ms: horizon, arg: horizon}
	adm.horizon.Store(b)
	return b.arg
}

type boxedHorizon struct {
	ms  int64
	arg any
}

// HorizonAfter is the horizon of a claim that arrived at t and whose
// gateway listens for its reply for d: t+d rounded up to a whole second
// (by which its call is boxed once a second, horizonArg).
func HorizonAfter(t time.Time, d time.Duration) time.Time {
	h := t.Add(d)
	if r := h.Truncate(time.Second); !r.Equal(h) {
		return r.Add(time.Second)
	}
	return h
}

// admitSha is admit.lua's SHA1, and dayTTLArg DayKeyTTL in seconds, each
// boxed once.
var (
	admitSha  any = lua.Admit.Hash()
	dayTTLArg any = int64(rdb.DayKeyTTL / time.Second)
)

// maxClaimsPerCall bounds the claims of one admit.lua call: its HMGET
// unpacks two fields per claim, and Lua's unpack has a limit (a few
// thousand). A bucket's claims beyond it go in the next call of the same
// pipeline, which Redis runs after it: the order holds.
const maxClaimsPerCall = 256

// admitCalls groups the pending claims by the bucket that decides them,
// each group in the claims' order, the groups in the order of their first
// claim. A batch holds few buckets: a linear search finds a claim'adm.
func (adm *Admitter) admitCalls(claims []Claim, pending []int) []admitCall {
	calls := make([]admitCall, 0, 1)
	for _, i := range pending {
		c := claims[i]
		n := adm.s.KnownBuckets(c.VoucherID)
		b := adm.userBucketOf(c.VoucherID, c.UserID, n)
		k := slices.IndexFunc(calls, func(a admitCall) bool { return a.b == b && len(a.claims) < maxClaimsPerCall })
		if k < 0 {
			k = len(calls)
			room := min(len(pending), maxClaimsPerCall) // most batches are one call
			calls = append(calls, admitCall{b: b, keys: adm.callKeysOf(b), n: n,
				claims: make([]int, 0, room), base: c.Now.UnixMilli(), lines: make([]byte, 0, 32*room)})
		}
		call := &calls[k]
		call.claims = append(call.claims, i)
		call.lines = call.line(call.lines, c)
		if !c.Horizon.IsZero() {
			if h := c.Horizon.UnixMilli(); call.horizon == 0 || h < call.horizon {
				call.horizon = h
			}
		}
	}
	return calls
}

// line appends claim c's line (admit.lua's claim line) to buf, naming its
// day and keys in the call.
func (call *admitCall) line(buf []byte, c Claim) []byte {
	var f [len(claimLine)]int64 // the numeric fields; 0 is each one's default but QTY's and DAY's
	if c.IdempotencyKey == "" { // a keyed claim is found by its key: its order need not carry it
		f[lineSerial] = int64(c.Serial)
	}
	f[lineDT] = c.Now.UnixMilli() - call.base
	f[lineQty] = max(c.Quantity, 1)
	d := slices.Index(call.days, c.Day)
	if d < 0 {
		d = len(call.days)
		call.days = append(call.days, c.Day)
	}
	f[lineDay] = int64(d + 1)
	f[lineAccess] = int64(c.Access)
	if c.IdempotencyKey != "" {
		call.named = append(call.named, keyspace.IdemKey(call.keys.name, c.UserID, c.IdempotencyKey))
		f[lineIdem], f[lineIdemTTL] = int64(len(call.named)), max(int64(c.IdempotencyTTL/time.Second), 1)
	}
	if c.Proof.ID != "" {
		key, m, ttl := c.Proof.Args(call.keys.name)
		call.named = append(call.named, key)
		f[lineProof], f[lineProofMax], f[lineProofTTL] = int64(len(call.named)), m, ttl
	}
	def := func(k int) bool { // field k is its default
		switch k {
		case lineQty, lineDay:
			return f[k] == 1
		case linePass:
			return c.Pass == ""
		}
		return f[k] == 0
	}
	last := len(f) - 1 // the fields after the last written are their defaults
	for last > lineUser && def(last) {
		last--
	}
	buf = append(buf, c.UserID...)
	for k := lineUser + 1; k <= last; k++ {
		buf = append(buf, ' ')
		switch {
		case k == lineSerial:
			buf = strconv.AppendUint(buf, uint64(f[k]), 16)
		case k != linePass:
			buf = strconv.AppendInt(buf, f[k], 10)
		case c.Pass != "":
			buf = append(buf, c.Pass...)
		default:
			buf = append(buf, '0')
		}
	}
	return append(buf, '\n')
}

// ErrUnsendable refuses a claim that cannot travel in a claim line, its user id
// empty or holding a space or a control character, or its pass other
// than digits, colons and minus signs ("PLACE:EXP_MS"): it would read
// back as another claim, or break the call's other claims. It is refused
// before the call; the gateway never makes one (its user ids are 1-64 of
// A-Z a-z 0-9 _ . @ -).
var ErrUnsendable = errors.New("claim cannot be sent to admit.lua")

// sendable reports whether claim c's line reads back as c: the fields
// admit.lua's parser splits on spaces and newlines are free of them.
func sendable(c Claim) bool {
	if c.UserID == "" {
		return false
	}
	for i := 0; i < len(c.UserID); i++ {
		if b := c.UserID[i]; b <= ' ' || b == 0x7f {
			return false
		}
	}
	for i := 0; i < len(c.Pass); i++ {
		if b := c.Pass[i]; (b < '0' || b > '9') && b != ':' && b != '-' {
			return false
		}
	}
	return true
}

// pipelineError is a failed round trip's error as its claims' answer:
// ErrNotSent when nothing can have reached Redis (no connection could be
// had or dialled, the client is closed), else ErrOutcomeUnknown: the
// commands may have been written, and run, with their replies lost (a
// read timeout, a reset connection).
func pipelineError(err error) error {
	var op *net.OpError
	switch {
	case errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrClosed),
		errors.As(err, &op) && op.Op == "dial":
		return fmt.Errorf("admit pipeline: %w: %w", ErrNotSent, err)
	}
	return fmt.Errorf("admit pipeline: %w: %w", ErrOutcomeUnknown, err)
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

// admission reads admit.lua's reply to one claim: a refusal's code, or
// an admission's "POSITION FLAGS[ ITEM]".
func admission(res any, p int) (Admission, error) {
	switch r := res.(type) {
	case int64:
		if e := rdb.Refusal(r); e != nil {
			return Admission{}, e
		}
		return Admission{}, fmt.Errorf("admit: unknown code %d", r)
	case string:
		pos, rest, _ := strings.Cut(r, " ")
		flags, raw, _ := strings.Cut(rest, " ")
		if len(flags) != 1 || flags[0] < '0' || flags[0] > '3' {
			break
		}
		a, err := admissionAt(pos, p, raw)
		if err != nil {
			return Admission{}, err
		}
		a.Replayed, a.Entry = flags[0]&1 != 0, flags[0]&2 != 0
		return a, nil
	}
	return Admission{}, fmt.Errorf("admit: unexpected reply %v", res)
}

// admissionAt is the admission of the order at stream position pos of
// partition p, with the item it took (raw, "" for units). A position
// "ms-P@Q" is of partition Q: an idempotency record a split copied into
// another bucket than the one that admitted it (pkg/rdb/split).
func admissionAt(pos string, p int, raw string) (Admission, error) {
	if at, q, ok := strings.Cut(pos, "@"); ok {
		n, err := strconv.Atoi(q)
		if err != nil {
			return Admission{}, fmt.Errorf("admit: bad position %q", pos)
		}
		pos, p = at, n
	}
	id, err := order.IDFromPosition(pos, p)
	if err != nil {
		return Admission{}, fmt.Errorf("admit: %w", err)
	}
	item, err := order.ParseItem(raw)
	if err != nil {
		return Admission{}, fmt.Errorf("admit: %w", err)
	}
	return Admission{OrderID: id, Item: item}, nil
}

// admitGroup is the claims (their positions j) sent on one pipeline.
type admitGroup struct {
	pipe redis.Pipeliner
	js   []int
}

// admitGroups splits a round of claims (their partitions) into pipelines:
// one on the admission client, or, when the store waits for replicas on a
// cluster, one per master on that master's own client, so that each WAIT
// follows its master's writes on their connection.
func (adm *Admitter) admitGroups(ctx context.Context, parts []int) ([]admitGroup, error) {
	c := adm.admitClient()
	cc, cluster := c.(*redis.ClusterClient)
	if !cluster || !adm.s.Durability().Waits() {
		js := make([]int, len(parts))
		for j := range js {
			js[j] = j
		}
		return []admitGroup{{pipe: c.Pipeline(), js: js}}, nil
	}
	byAddr := map[string]int{}
	var gs []admitGroup
	for j, p := range parts {
		n, err := cc.MasterForKey(ctx, rdb.StreamKey(p))
		if err != nil {
			return nil, fmt.Errorf("master of partition %d: %w", p, err)
		}
		k, ok := byAddr[n.Options().Addr]
		if !ok {
			k = len(gs)
			byAddr[n.Options().Addr] = k
			gs = append(gs, admitGroup{pipe: n.Pipeline()})
		}
		gs[k].js = append(gs[k].js, j)
	}
	return gs, nil
}
