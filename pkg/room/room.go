package room

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	mbits "math/bits"
	"strconv"
	"strings"
	"time"
)

// PassFactor bounds the passes outstanding: at most the units left in
// Redis times this. Above 1 because some admitted users never buy (their
// pass lapses after pass_seconds and goes to the next waiter); small, so
// that nobody is admitted to a sale that cannot serve them: with 100
// units left, at most 150 people hold a pass that has not bought. Units
// held by unpaid orders are not counted: they come back to the stock (and
// the room admits again) only if their orders are cancelled.
const PassFactor = 1.5

// Config is a voucher's waiting room.
type Config struct {
	// AdmitPerSecond is the rate at which waiters are admitted.
	AdmitPerSecond int64 `json:"admit_per_second"`
	// PrequeueSeconds: joins this long before the start are shuffled.
	PrequeueSeconds int64 `json:"prequeue_seconds"`
	// PassSeconds is how long an admitted user's pass lasts.
	PassSeconds int64 `json:"pass_seconds"`
}

// Bounds of a room's settings.
const (
	MaxAdmitPerSecond  = 1_000_000
	MaxPrequeueSeconds = 7 * 24 * 3600
	MaxPassSeconds     = 24 * 3600
	DefaultPassSeconds = 120
)

// Validate checks c, after defaults (a zero PassSeconds is DefaultPassSeconds).
func (c *Config) Validate() error {
	if c.PassSeconds == 0 {
		c.PassSeconds = DefaultPassSeconds
	}
	switch {
	case c.AdmitPerSecond < 1 || c.AdmitPerSecond > MaxAdmitPerSecond:
		return fmt.Errorf("waiting_room.admit_per_second must be between 1 and %d", MaxAdmitPerSecond)
	case c.PrequeueSeconds < 0 || c.PrequeueSeconds > MaxPrequeueSeconds:
		return fmt.Errorf("waiting_room.prequeue_seconds must be between 0 and %d", MaxPrequeueSeconds)
	case c.PassSeconds < 1 || c.PassSeconds > MaxPassSeconds:
		return fmt.Errorf("waiting_room.pass_seconds must be between 1 and %d", MaxPassSeconds)
	}
	return nil
}

// Encode is c as stored beside a change (voucher_changes.room) and
// handed to change.lua: "N:PRE_MS:PASS_MS"; "0" for no room.
func (c *Config) Encode() string {
	if c == nil {
		return "0"
	}
	return strconv.FormatInt(c.AdmitPerSecond, 10) + ":" + strconv.FormatInt(c.PrequeueSeconds*1000, 10) + ":" +
		strconv.FormatInt(c.PassSeconds*1000, 10)
}

// Rate is c's admissions a second, 0 for no room.
func (c *Config) Rate() int64 {
	if c == nil {
		return 0
	}
	return c.AdmitPerSecond
}

// Prequeue is c's pre-queue in seconds, 0 for no room.
func (c *Config) Prequeue() int64 {
	if c == nil {
		return 0
	}
	return c.PrequeueSeconds
}

// PassFor is how long c's pass lasts in seconds, 0 for no room.
func (c *Config) PassFor() int64 {
	if c == nil {
		return 0
	}
	return c.PassSeconds
}

// Decode reads Encode's form; nil for "0" and "".
func Decode(s string) (*Config, error) {
	if s == "0" || s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return nil, fmt.Errorf("room: bad encoding %q", s)
	}
	var n [3]int64
	for i, p := range parts {
		v, err := strconv.ParseInt(p, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("room: bad encoding %q", s)
		}
		n[i] = v
	}
	return &Config{AdmitPerSecond: n[0], PrequeueSeconds: n[1] / 1000, PassSeconds: n[2] / 1000}, nil
}

// States of a waiter, the "state" of the queue's answers.
const (
	Waiting  = "waiting"
	Admitted = "admitted"
	SoldOut  = "sold_out"
	Closed   = "closed"
	Paused   = "paused"
	// Lapsed means the waiter was admitted and the pass ran out (its slot
	// went to the next waiter). Joining again answers the same.
	Lapsed = "lapsed"
)

// Place is a waiter's place as the room holds it: the K-th join of the
// pre-queue (Pre true, placed by Shuffle once the sale starts), or a
// ticket: the 1-based place in the queue.
type Place struct {
	Pre bool
	N   int64
}

// ParsePlace reads a place as room.lua writes it: "pK" or "T".
func ParsePlace(s string) (Place, error) {
	pre := strings.HasPrefix(s, "p")
	n, err := strconv.ParseInt(strings.TrimPrefix(s, "p"), 10, 64)
	if err != nil || n < 1 {
		return Place{}, fmt.Errorf("room: bad place %q", s)
	}
	return Place{Pre: pre, N: n}, nil
}

func (p Place) String() string {
	if p.Pre {
		return "p" + strconv.FormatInt(p.N, 10)
	}
	return strconv.FormatInt(p.N, 10)
}

// Snapshot is a room's state as one run of room.lua left it.
type Snapshot struct {
	At       time.Time // the clock room.lua ran with
	Front    int64     // places admitted: 1..Front
	Tail     int64     // places given (the pre-queue's included, once frozen)
	Pre      int64     // joins of the pre-queue
	Frozen   bool      // the pre-queue is closed and placed
	Stock    int64     // units (items) left in Redis
	Live     int64     // passes outstanding
	Segments []Segment // the unlapsed admissions, oldest first
	Gone     int64     // places 1..Gone lapsed
	Seed     uint64    // keys the pre-queue's shuffle
	// ShuffleVersion: the shuffle the room's seed was made for.
	ShuffleVersion int
	StartsAt       time.Time
	EndsAt         time.Time // zero: no end
	Paused         bool
	Rate           int64 // admissions per second
	Pass           time.Duration
	Limit          int64 // the voucher's per-user limit
	// StalledAt, when not zero, is the clock of the tick that last found
	// the room stalled (paused, or its passes at their cap); OpensAt, a
	// stalled room's that can admit again: it admits from then on.
	StalledAt time.Time
	OpensAt   time.Time
	// Admitting is the rate at which places were really admitted, per
	// second, over the last ObserveWindow as one gateway's Cache saw
	// them (passes lapsing or used to buy let the room admit; a room
	// capped by its passes outstanding admits slower than Rate); < 0:
	// unknown (fewer than a second of states seen).
	Admitting float64
}

// Waiting is how many places are given and not yet admitted (the
// pre-queue's count before it is placed).
func (s *Snapshot) Waiting() int64 {
	if !s.Frozen {
		return s.Pre
	}
	return s.Tail - s.Front
}

// A Segment says that places up to Upto (after the previous segment's) hold a pass
// until Expires.
type Segment struct {
	Upto    int64
	Expires time.Time
}

// ErrNoPlace is the error of a place that is not (yet) a ticket.
var ErrNoPlace = errors.New("room: no place yet")

// Ticket is p's place in the queue: a pre-queue join's is its shuffled
// place, once the pre-queue is frozen (ErrNoPlace before).
func (s *Snapshot) Ticket(p Place) (int64, error) {
	if !p.Pre {
		return p.N, nil
	}
	if !s.Frozen || p.N > s.Pre {
		return 0, ErrNoPlace
	}
	return Shuffle(s.Seed, s.ShuffleVersion, s.Pre, p.N), nil
}

// PassExpires is when ticket t's pass lapses; zero when t is not admitted
// or its pass lapsed (its segment is gone).
func (s *Snapshot) PassExpires(t int64) time.Time {
	if t <= s.Gone || t > s.Front {
		return time.Time{}
	}
	for _, g := range s.Segments { // oldest first; at most ~100
		if t <= g.Upto {
			return g.Expires
		}
	}
	return time.Time{}
}

// OpenDelay is how long a stalled room (paused, or its passes at their
// cap) waits, once a tick finds it can admit again (a resume, a unit
// back, a pass lapsed), before it admits; StallTrusted, half of it, is how
// long after the tick that confirmed a stall a gateway refuses from
// memory a claim of a place its state does not admit. Nobody can have
// been told "admitted" meanwhile by another gateway: exact while the
// gateways' clocks agree within a quarter of OpenDelay (250 ms).
const (
	OpenDelay    = time.Second
	StallTrusted = OpenDelay / 2
)

// MayBeAdmittedBy reports whether ticket t (err: Ticket's answer), not
// admitted in s, may be by now: the pre-queue is placed at the start, a
// stalled room admits nobody for StallTrusted after the tick that found
// it so, and the room admits at most Rate a second, plus the second's
// credit it may bank (room.lua), after s was read.
func (s *Snapshot) MayBeAdmittedBy(t int64, err error, now time.Time) bool {
	if err != nil {
		return !s.Frozen && !now.Before(s.StartsAt)
	}
	if t <= s.Front {
		return false
	}
	if !s.StalledAt.IsZero() && now.Sub(s.StalledAt) < StallTrusted {
		return false
	}
	elapsed := max(now.Sub(s.At), 0)
	return t <= s.Front+s.Rate*int64(elapsed/time.Millisecond)/1000+s.Rate+1
}

// Answer is what a waiter is told.
type Answer struct {
	State    string
	Position int64 // 1-based among those waiting; 0 when not waiting or not yet placed
	Retry    time.Duration
	Ticket   int64     // 0 until placed
	Expires  time.Time // the pass's end, when admitted
	// ETA is how long a waiter has left to wait at the rate the room
	// really admitted lately (Snapshot.Admitting); < 0: unknown (not
	// waiting, not yet placed, nothing observed, or nobody admitted).
	ETA time.Duration
}

// Bounds of retry_after_ms: often enough to hear sold_out within a
// second when it may come (RetryMin, plus a tick of the gateway's state),
// never less often than RetryMax.
const (
	RetryMin = 700 * time.Millisecond
	RetryMax = 10 * time.Second
	// AdmittedRetry bounds an admitted buyer's wait between polls.
	AdmittedRetry = 2 * time.Second
)

// Answer tells the waiter at place p where they stand at now.
func (s *Snapshot) Answer(p Place, now time.Time) Answer {
	switch {
	case !s.EndsAt.IsZero() && !now.Before(s.EndsAt):
		t, _ := s.Ticket(p) // 0 for a pre-queue join never placed
		return Answer{State: Closed, Ticket: t, ETA: -1}
	case s.Paused:
		return Answer{State: Paused, Retry: 2 * time.Second, ETA: -1}
	}
	t, err := s.Ticket(p)
	if err != nil { // in the pre-queue: placed at the start
		return Answer{State: Waiting, Retry: clamp(s.StartsAt.Sub(now), RetryMin, RetryMax), ETA: -1}
	}
	if s.Stock <= 0 {
		return Answer{State: SoldOut, Ticket: t, Retry: RetryMax, ETA: -1}
	}
	if t <= s.Front {
		exp := s.PassExpires(t)
		if exp.IsZero() || !now.Before(exp) {
			return Answer{State: Lapsed, Ticket: t, ETA: -1}
		}
		// An admitted buyer asks again within AdmittedRetry, so learns of a
		// pause (or the sale sold out) that soon, from the gateway's state
		// of the room: no Redis call a poll.
		return Answer{State: Admitted, Ticket: t, Expires: exp, Retry: clamp(exp.Sub(now), RetryMin, AdmittedRetry), ETA: -1}
	}
	pos := t - s.Front
	return Answer{State: Waiting, Position: pos, Ticket: t, Retry: s.retry(pos), ETA: s.eta(pos)}
}

// eta is the wait of the waiter at position pos at the observed rate;
// -1 when none was observed.
func (s *Snapshot) eta(pos int64) time.Duration {
	if s.Admitting <= 0 {
		return -1
	}
	return time.Duration(float64(pos) / s.Admitting * float64(time.Second))
}

// retry is how long the waiter at position pos may wait before asking
// again: until their turn, or until the stock could run out at the
// earliest (the passes outstanding could buy it all now, or after the
// admissions still needed to buy it, at the room's rate, each buying the
// per-user limit), whichever is sooner; from then on RetryMin, so that
// each waiter hears sold_out within a second of it.
func (s *Snapshot) retry(pos int64) time.Duration {
	rate, limit := max(s.Rate, 1), max(s.Limit, 1)
	turn := time.Duration(pos) * time.Second / time.Duration(rate)
	short := s.Stock - s.Live*limit // units the passes outstanding cannot buy
	soldOut := time.Duration(0)
	if short > 0 {
		soldOut = time.Duration(short) * time.Second / time.Duration(rate*limit)
	}
	return clamp(min(turn, soldOut), RetryMin, RetryMax)
}

func clamp(d, lo, hi time.Duration) time.Duration { return min(max(d, lo), hi) }

// Versions of the pre-queue's shuffle. A room keeps the version of the
// gateway that seeded it (its seed says which: Seed), so a room seeded
// before an upgrade keeps its places while gateways of both versions run.
const (
	// ShuffleV1 is 4 Feistel rounds. Its places are measurably less random
	// where n is just under a power of 4 (the halves fill the domain):
	// the arrival-vs-place Kendall tau spread 1.2 times a random
	// permutation's at n = 1,001, 1,024 and 4,096.
	ShuffleV1 = 1
	// ShuffleV2 is 12 rounds, the version new rooms take: Kendall tau
	// indistinguishable from a random permutation's at every n
	// (TestTheShuffleIsIndistinguishableFromRandom).
	ShuffleV2 = 2
)

// shuffleRounds is each version's Feistel rounds.
var shuffleRounds = [...]uint64{ShuffleV1: 4, ShuffleV2: 12}

// Shuffle is the place of the k-th of n pre-queue joins (both 1-based):
// a permutation of 1..n keyed by seed, as shuffle version v makes it (a
// Feistel network on the smallest even-bit domain that holds n, walking
// the cycle back into 1..n). Computed, not stored: a waiter costs the
// room nothing for it.
func Shuffle(seed uint64, v int, n, k int64) int64 {
	if n <= 1 {
		return 1
	}
	rounds := shuffleRounds[ShuffleV2]
	if v == ShuffleV1 {
		rounds = shuffleRounds[ShuffleV1]
	}
	bits := 64 - mbits.LeadingZeros64(uint64(n-1))
	half := (bits + 1) / 2
	mask := uint64(1)<<half - 1
	x := uint64(k - 1)
	for {
		l, r := x>>half, x&mask
		for round := uint64(0); round < rounds; round++ {
			l, r = r, l^(mix(r^seed+round*0x9e3779b97f4a7c15)&mask)
		}
		x = l<<half | r
		if x < uint64(n) {
			return int64(x) + 1
		}
	}
}

// A room's seed as room.lua keeps it: 16 hex digits (ShuffleV1, the
// gateways before ShuffleV2), or seedV2Prefix and 16 hex digits.
const seedV2Prefix = "2-"

// NewSeed is a seed for a new room, of the current shuffle version.
func NewSeed(b [8]byte) string { return seedV2Prefix + hex.EncodeToString(b[:]) }

// ParseSeed reads a room's seed and its shuffle version.
func ParseSeed(s string) (seed uint64, version int, err error) {
	version = ShuffleV1
	if rest, ok := strings.CutPrefix(s, seedV2Prefix); ok {
		s, version = rest, ShuffleV2
	}
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 8 {
		return 0, 0, fmt.Errorf("bad seed %q", s)
	}
	return binary.BigEndian.Uint64(b), version, nil
}

// mix is SplitMix64's finalizer.
func mix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
