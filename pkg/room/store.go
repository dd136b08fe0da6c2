package room

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/flashsale/flashsale/pkg/rdb"
)

// Errors of Store's calls; a join's proof of work errs with rdb's
// ErrProofRequired and ErrProofInvalid, a join without the access code a
// voucher needs with rdb.ErrAccessRequired (rdb.ErrAccessInvalid: with
// another's), a missing voucher with
// rdb.ErrVoucherNotFound.
var (
	ErrNoRoom     = errors.New("room: the voucher has no waiting room")
	ErrNotOpen    = errors.New("room: the queue is not open yet")
	ErrEnded      = errors.New("room: the sale has ended")
	ErrNotInQueue = errors.New("room: not in the queue")
	ErrFull       = errors.New("room: the room has given all the places it may")
)

// codes are room.lua's refusals (rdb's table of the scripts' codes), as
// errors.
var codes = map[int64]error{
	rdb.CodeVoucherNotFound: rdb.ErrVoucherNotFound, rdb.CodeNotLoaded: rdb.ErrNotLoaded, rdb.CodeNotStarted: ErrNotOpen,
	rdb.CodeEnded: ErrEnded, rdb.CodeProofRequired: rdb.ErrProofRequired, rdb.CodeProofInvalid: rdb.ErrProofInvalid,
	rdb.CodeNoRoom: ErrNoRoom, rdb.CodeNotInQueue: ErrNotInQueue, rdb.CodeRoomFull: ErrFull,
	rdb.CodeAccessRequired: rdb.ErrAccessRequired, rdb.CodeAccessInvalid: rdb.ErrAccessInvalid,
}

// DefaultMaxWaiters bounds the places a room gives unless the operator
// says otherwise (FLASHSALE_ROOM_MAX_WAITERS): about 56 MB of Redis at
// 55.6 bytes a waiter (docs/BENCHMARKS.md, "Waiting rooms"). Without a
// bound, joins from made-up accounts grow a room's hash for as long as
// they come.
const DefaultMaxWaiters = 1_000_000

// IdleTTL is how long the room of a voucher without an expiry (no
// ends_at) is kept after its last change; a voucher with one takes its
// room's keys with it at its expiry.
const IdleTTL = 7 * 24 * time.Hour

// Store runs rooms in Redis (room.lua), in the voucher's slot.
type Store struct {
	r          *rdb.Store
	maxWaiters int64
}

// NewStore returns a Store over r's Redis whose rooms give at most
// maxWaiters places each (0: DefaultMaxWaiters).
func NewStore(r *rdb.Store, maxWaiters int64) *Store {
	return &Store{r: r, maxWaiters: cmp.Or(maxWaiters, DefaultMaxWaiters)}
}

// Tick runs voucher v's room's clock at now and returns its state,
// recording the tickets told how the sale ended since the last tick (told;
// see Cache.Told).
func (s *Store) Tick(ctx context.Context, v int64, now time.Time, told ...Told) (*Snapshot, error) {
	snap, _, err := s.run(ctx, v, now, "tick", "", rdb.Proof{}, rdb.NoAccessCode, told...)
	return snap, err
}

// Peek returns voucher v's room's state as its last tick left it: the
// clock is not run and nothing is written (a claim's read; running the
// clock is the ticks' job).
func (s *Store) Peek(ctx context.Context, v int64, now time.Time) (*Snapshot, error) {
	snap, _, err := s.run(ctx, v, now, "peek", "", rdb.Proof{}, rdb.NoAccessCode)
	return snap, err
}

// Join gives user a place in v's room (the same place again to one who
// has one); proof is the join's verified proof of work, if any, and access
// its access code (pkg/access), verified.
func (s *Store) Join(ctx context.Context, v int64, user string, proof rdb.Proof, access rdb.AccessCode, now time.Time) (*Snapshot, Place, error) {
	return s.run(ctx, v, now, "join", user, proof, access)
}

// Find returns user's place in v's room (ErrNotInQueue: none).
func (s *Store) Find(ctx context.Context, v int64, user string, now time.Time) (*Snapshot, Place, error) {
	return s.run(ctx, v, now, "get", user, rdb.Proof{}, rdb.NoAccessCode)
}

func (s *Store) run(ctx context.Context, v int64, now time.Time, op, user string, proof rdb.Proof, access rdb.AccessCode, told ...Told) (*Snapshot, Place, error) {
	var seed [8]byte
	_, _ = rand.Read(seed[:])
	var bits []byte
	for i, t := range told {
		if i > 0 {
			bits = append(bits, ' ')
		}
		bits = strconv.AppendInt(bits, t.bit(), 10)
	}
	res, err := s.script(ctx, v, proof, now.UnixMilli(), op, user, NewSeed(seed),
		PassFactor, s.maxWaiters, int64(IdleTTL/time.Second), int64(access), bits, OpenDelay.Milliseconds())
	if err != nil {
		return nil, Place{}, err
	}
	code, _ := res[0].(int64)
	if code != 0 {
		if e, ok := codes[code]; ok {
			return nil, Place{}, e
		}
		return nil, Place{}, fmt.Errorf("room %d: unknown code %d", v, code)
	}
	snap, err := parseSnapshot(res, now)
	if err != nil {
		return nil, Place{}, fmt.Errorf("room %d: %w", v, err)
	}
	var p Place
	if raw, _ := res[1].(string); raw != "" {
		if p, err = ParsePlace(raw); err != nil {
			return nil, Place{}, err
		}
	}
	return snap, p, nil
}

// parseSnapshot reads room.lua's reply {code, place, front, tail, pre,
// frozen, stock, live, segs, seed, start_ms, end_ms, paused, rate,
// pass_ms, limit, gone, stall_ms, open_ms}.
func parseSnapshot(res []any, now time.Time) (*Snapshot, error) {
	if len(res) != 19 {
		return nil, fmt.Errorf("unexpected reply %v", res)
	}
	n := func(i int) int64 { x, _ := res[i].(int64); return x }
	s := &Snapshot{At: now, Front: n(2), Tail: n(3), Pre: n(4), Frozen: n(5) == 1, Stock: n(6), Live: n(7),
		StartsAt: time.UnixMilli(n(10)), Paused: n(12) == 1, Rate: n(13), Pass: time.Duration(n(14)) * time.Millisecond,
		Limit: n(15), Gone: n(16)}
	if e := n(11); e > 0 {
		s.EndsAt = time.UnixMilli(e)
	}
	if st := n(17); st > 0 {
		s.StalledAt = time.UnixMilli(st)
	}
	if o := n(18); o > 0 {
		s.OpensAt = time.UnixMilli(o)
	}
	seed, _ := res[9].(string)
	var err error
	if s.Seed, s.ShuffleVersion, err = ParseSeed(seed); err != nil {
		return nil, err
	}
	segs, _ := res[8].(string)
	for _, f := range strings.Fields(segs) {
		parts := strings.Split(f, ":")
		if len(parts) != 3 {
			return nil, fmt.Errorf("bad segment %q", f)
		}
		u, err1 := strconv.ParseInt(parts[0], 10, 64)
		e, err2 := strconv.ParseInt(parts[1], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("bad segment %q", f)
		}
		s.Segments = append(s.Segments, Segment{Upto: u, Expires: time.UnixMilli(e)})
	}
	return s, nil
}
