package room

// One gateway's last state of each waiting room it serves, refreshed by
// its ticks: polls are answered from here without Redis.

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/flashsale/flashsale/pkg/rdb"
)

// Cache holds the last state of each room asked about, and which
// vouchers were found to have none. A claim reads the rooms' map without
// a lock and without allocating (a sync.Map would box the voucher id);
// rooms come and go rarely, so a change copies it.
//
// What it costs Redis is bounded by the rooms that exist, not by the ids
// asked about: every voucher id is a valid question, so a voucher without
// a room (or no voucher at all) is not a room. The rooms' index (SetIndex,
// rdb.RoomIndex, read by the gateway once a second) answers an id it
// names without a room, or does not name at all, from memory (Indexed).
// An id it cannot answer (its partition not indexed yet) is remembered
// apart once read, in a map of at most MaxNoRoom ids, for NoRoomFor: it
// is read from Redis at most once per NoRoomFor, shared by every asker,
// and never ticked; a new id in a full map takes the oldest one's place.
type Cache struct {
	m     atomic.Pointer[map[int64]*Cached]
	mu    sync.Mutex // serializes changes of m
	store *Store
	now   func() time.Time

	index atomic.Pointer[rdb.RoomIndex]

	noneMu sync.Mutex
	none   map[int64]noRoom // guarded by noneMu
	ring   []int64          // the ids of none by the slot they own, oldest at head (guarded by noneMu)
	head   int
	reads  singleflight.Group
	ticks  sync.WaitGroup // rooms' ticks under way
}

// noRoom is why a voucher had no room to answer from, and when Redis
// said so.
type noRoom struct {
	err  error
	at   time.Time
	slot int // its id's slot in the ring
}

const (
	// NoRoomFor is how long a voucher found without a room (or missing)
	// is answered so without asking Redis again: a room put on it shows
	// to polls after at most this long (claims ask the admission script,
	// which always knows).
	NoRoomFor = 2 * time.Second
	// MaxNoRoom bounds the ids remembered without a room; past it a new
	// one takes the place of the one remembered longest.
	MaxNoRoom = 10_000
	// TickDeadline bounds one room's tick: a slow one is given up on
	// without holding back any other room's.
	TickDeadline = time.Second
	// maxTicking bounds the rooms' ticks under way at once.
	maxTicking = 16
)

// NewCache returns a Cache over store (nil: none, nothing is read) on the
// clock now.
func NewCache(store *Store, now func() time.Time) *Cache {
	return &Cache{store: store, now: now, none: map[int64]noRoom{}, ring: make([]int64, MaxNoRoom)}
}

// Store is the rooms' store the cache reads.
func (c *Cache) Store() *Store { return c.store }

// Cached is one room's last state, or why it has none.
type Cached struct {
	snap atomic.Pointer[Snapshot]
	// gone, when set, is why the voucher no longer has a room to answer
	// from (ErrNoRoom: taken away; rdb.ErrVoucherNotFound), as a request
	// learnt it: the room's next tick confirms it and drops the entry.
	gone    atomic.Pointer[error]
	seen    atomic.Int64 // unix ns of the last request about it
	ticking atomic.Bool  // a tick of the room is under way
	// mu guards samples: the admitted count of the states set in the
	// last ObserveWindow, oldest first, from which each new state's
	// Admitting is computed.
	mu      sync.Mutex
	samples []sample
	// told: the tickets told how the sale ended since the last tick
	// (guarded by mu), sent to Redis with the next.
	told map[Told]struct{}
}

// Told is a ticket told how the sale ended: sold out, or closed.
type Told struct {
	Ticket int64
	Closed bool
}

// bit is its bit in the room's told bitmap (room.lua's KEYS[6]).
func (t Told) bit() int64 {
	if t.Closed {
		return 2*t.Ticket + 1
	}
	return 2 * t.Ticket
}

// MaxToldPerTick bounds the tickets one tick records (a tick's argument);
// the rest wait for the next ticks.
const MaxToldPerTick = 20_000

// Told records that this gateway gave answer a from voucher v's room: a
// ticket told sold_out or closed is recorded in Redis with the room's next
// tick, for the sale's report. Other answers cost nothing.
func (c *Cache) Told(v int64, a Answer) {
	if a.Ticket <= 0 || (a.State != SoldOut && a.State != Closed) {
		return
	}
	if e := c.entries()[v]; e != nil {
		e.tell(Told{Ticket: a.Ticket, Closed: a.State == Closed})
	}
}

// tell adds tickets to those to record with the next tick.
func (e *Cached) tell(ts ...Told) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.told == nil {
		e.told = map[Told]struct{}{}
	}
	for _, t := range ts {
		e.told[t] = struct{}{}
	}
}

// takeTold takes up to MaxToldPerTick of the tickets told.
func (e *Cached) takeTold() []Told {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Told
	for t := range e.told {
		if len(out) == MaxToldPerTick {
			break
		}
		out = append(out, t)
		delete(e.told, t)
	}
	return out
}

type sample struct {
	at    time.Time
	front int64
}

// ObserveWindow is how far back a room's admission rate is observed:
// long enough to span a few of the room's admissions at a low rate, short
// enough to follow a room that slows down as its passes go unused.
const ObserveWindow = 5 * time.Second

// observe sets s.Admitting from the states set before it (the rate at
// which places were really admitted over the last ObserveWindow since the
// start, as this gateway saw it), and records s.
func (e *Cached) observe(s *Snapshot) {
	e.mu.Lock()
	defer e.mu.Unlock()
	keep := e.samples[:0]
	for _, x := range e.samples {
		if s.At.Sub(x.at) <= ObserveWindow && !x.at.After(s.At) && x.front <= s.Front && !x.at.Before(s.StartsAt) {
			keep = append(keep, x)
		}
	}
	// States before the start are not kept: nobody is admitted then, and
	// the first state after it holds the start's admissions (a second's
	// worth at once), not a rate.
	if s.At.Before(s.StartsAt) {
		e.samples = keep[:0]
		s.Admitting = -1
		return
	}
	if n := len(keep); n > 0 && !keep[n-1].at.Before(s.At) { // a state of the same instant: the latest counts
		keep[n-1].front = s.Front
	} else {
		keep = append(keep, sample{at: s.At, front: s.Front})
	}
	e.samples = keep
	s.Admitting = -1
	if first := keep[0]; s.At.Sub(first.at) >= time.Second {
		s.Admitting = float64(s.Front-first.front) / s.At.Sub(first.at).Seconds()
	}
}

// Known is the entry's state (nil: not read yet), or why it has none.
func (e *Cached) Known() (*Snapshot, error) {
	if err := e.gone.Load(); err != nil {
		return nil, *err
	}
	return e.snap.Load(), nil
}

// Set records an answer: a state, or why there is none (both nil:
// unknown, ask Redis).
func (e *Cached) Set(s *Snapshot, err error) {
	if err != nil {
		e.gone.Store(&err)
		e.snap.Store(nil)
		return
	}
	if s != nil {
		e.observe(s)
	}
	e.snap.Store(s)
	e.gone.Store(nil)
}

// Gone reports whether err says a voucher has no room to answer from: an
// answer to remember, not a failure.
func Gone(err error) bool {
	return errors.Is(err, ErrNoRoom) || errors.Is(err, rdb.ErrVoucherNotFound)
}

// entries is the current map (nil: none yet).
func (c *Cache) entries() map[int64]*Cached {
	if m := c.m.Load(); m != nil {
		return *m
	}
	return nil
}

// change replaces the map with f's change of a copy.
func (c *Cache) change(f func(map[int64]*Cached)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.entries()
	next := make(map[int64]*Cached, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	f(next)
	c.m.Store(&next)
}

// Of returns voucher v's entry, nil when this cache knows of no room.
func (c *Cache) Of(v int64) *Cached {
	e := c.entries()[v]
	if e == nil {
		return nil
	}
	e.seen.Store(c.now().UnixNano())
	return e
}

// Learn records that voucher v has a room, with s (if not nil) as its
// state, and returns its entry.
func (c *Cache) Learn(v int64, s *Snapshot) *Cached {
	e := c.entries()[v]
	if e == nil {
		c.change(func(m map[int64]*Cached) {
			if e = m[v]; e == nil {
				e = &Cached{}
				m[v] = e
			}
		})
		c.noneMu.Lock()
		delete(c.none, v)
		c.noneMu.Unlock()
	}
	e.seen.Store(c.now().UnixNano())
	if s != nil {
		e.Set(s, nil)
	}
	return e
}

// NoRoom records that voucher v has no room to answer from, err saying
// why (Gone(err)): a room this cache serves is answered so until its next
// tick drops it; any other id is remembered for NoRoomFor, if there is
// room for it.
func (c *Cache) NoRoom(v int64, err error) {
	if e := c.entries()[v]; e != nil {
		e.Set(nil, err)
		return
	}
	now := c.now()
	c.noneMu.Lock()
	defer c.noneMu.Unlock()
	if n, ok := c.none[v]; ok { // its slot stays
		c.none[v] = noRoom{err: err, at: now, slot: n.slot}
		return
	}
	// The next slot's id (if it still owns it) is the one remembered
	// longest: it goes, in O(1), however full the map.
	slot := c.head
	if old, ok := c.none[c.ring[slot]]; ok && old.slot == slot {
		delete(c.none, c.ring[slot])
	}
	c.ring[slot] = v
	c.head = (slot + 1) % len(c.ring)
	c.none[v] = noRoom{err: err, at: now, slot: slot}
}

// ReadIndex reads what changed in the rooms' index (rdb.RoomIndex) since
// its last read, for Indexed to answer from; the caller reads it every so
// often (the gateway: every second). When it cannot be read, Indexed
// answers nothing until it can.
func (c *Cache) ReadIndex(ctx context.Context) error {
	if c.store == nil {
		return nil
	}
	x, err := c.store.r.RoomIndex(ctx, c.index.Load())
	c.index.Store(x)
	return err
}

// Indexed is what the rooms' index, as last read, says of voucher v,
// which this cache has no room of: ErrNoRoom (a voucher without one),
// rdb.ErrVoucherNotFound (no voucher), or nil (it has a room, or the index
// cannot say: ask Redis). No question makes the index be read again: a
// voucher created since the last read (an id above every one it names,
// say) is not found until the next one. A room put on an existing voucher
// shows then too: a caller that holds proof of a room (a queue token)
// does not ask.
func (c *Cache) Indexed(v int64) error {
	hasRoom, exists, known := c.index.Load().Of(v)
	switch {
	case !known || hasRoom:
		return nil
	case !exists:
		return rdb.ErrVoucherNotFound
	}
	return ErrNoRoom
}

// pruneNoRoom forgets the ids remembered longer than NoRoomFor (noneMu held).
func (c *Cache) pruneNoRoom(now time.Time) {
	for v, n := range c.none {
		if now.Sub(n.at) >= NoRoomFor {
			delete(c.none, v)
		}
	}
}

// noRoomOf is why voucher v has no room, as Redis said within NoRoomFor;
// nil when not known.
func (c *Cache) noRoomOf(v int64) error {
	c.noneMu.Lock()
	defer c.noneMu.Unlock()
	n, ok := c.none[v]
	if !ok {
		return nil
	}
	if c.now().Sub(n.at) >= NoRoomFor {
		delete(c.none, v)
		return nil
	}
	return n.err
}

// NoRooms is how many ids are remembered without a room.
func (c *Cache) NoRooms() int {
	c.noneMu.Lock()
	defer c.noneMu.Unlock()
	return len(c.none)
}

// Forget drops voucher v's entry.
func (c *Cache) Forget(v int64) { c.change(func(m map[int64]*Cached) { delete(m, v) }) }

// Known is v's room's last state (nil: it has a room not read yet, or
// the cache knows nothing of it), or why it has none.
func (c *Cache) Known(v int64) (*Snapshot, error) {
	if e := c.Of(v); e != nil {
		return e.Known()
	}
	return nil, c.noRoomOf(v)
}

// State returns v's room's state: the last one, or one read now. A
// voucher without a room (or a voucher gone) is remembered as such, like
// a state, so that its polls cost Redis at most one read per NoRoomFor,
// whoever asks; the askers of an id not known share one read.
func (c *Cache) State(ctx context.Context, v int64) (*Snapshot, error) {
	if s, err := c.Known(v); s != nil || err != nil {
		return s, err
	}
	res, err, _ := c.reads.Do(strconv.FormatInt(v, 10), func() (any, error) { return c.read(ctx, v) })
	if err != nil {
		return nil, err
	}
	return res.(*Snapshot), nil
}

// read reads v's room now, as its last tick left it (a read never
// writes: ticks run the room's clock), and records what it found: its
// state, or that it has none.
func (c *Cache) read(ctx context.Context, v int64) (*Snapshot, error) {
	s, err := c.store.Peek(ctx, v, c.now())
	switch {
	case Gone(err):
		c.NoRoom(v, err)
	case err == nil:
		c.Learn(v, s)
	}
	return s, err
}

// Fresh is v's room's state as Redis holds it at since or later: the
// last one known when it was read then, else one read now and kept,
// shared by every caller whose since it satisfies. A claim whose place
// this gateway's last state does not admit asks it before refusing:
// another gateway's fresher state may have told the buyer "admitted".
func (c *Cache) Fresh(ctx context.Context, v int64, since time.Time) (*Snapshot, error) {
	key := "fresh:" + strconv.FormatInt(v, 10)
	for range 2 { // a read begun before since is joined once, then one of its own
		if s, err := c.Known(v); err != nil || (s != nil && !s.At.Before(since)) {
			return s, err
		}
		res, err, _ := c.reads.Do(key, func() (any, error) { return c.read(ctx, v) })
		if err != nil {
			return nil, err
		}
		if s := res.(*Snapshot); !s.At.Before(since) {
			return s, nil
		}
	}
	return c.Known(v)
}

// Tick refreshes every room asked about within idle and forgets the
// others, calling forgot for each room forgotten and ticked with each
// refresh's answer (a state, or why there is none, or a failure); a room
// found to have none is forgotten after ticked. Each room's tick runs on
// its own, within TickDeadline, and a room whose last tick is still under
// way is left for the next pass: a slow room delays no other. Tick
// returns when every tick it began is done, or when ctx ends, whichever
// comes first; Wait waits for the rest.
func (c *Cache) Tick(ctx context.Context, idle time.Duration, ticked func(v int64, s *Snapshot, err error), forgot func(v int64)) {
	now := c.now()
	c.noneMu.Lock()
	c.pruneNoRoom(now)
	c.noneMu.Unlock()
	done := make(chan struct{}, maxTicking)
	begun := 0
	for v, e := range c.entries() {
		if now.Sub(time.Unix(0, e.seen.Load())) > idle {
			c.Forget(v)
			forgot(v)
			continue
		}
		if begun == maxTicking || !e.ticking.CompareAndSwap(false, true) {
			continue
		}
		begun++
		c.ticks.Add(1)
		go func() {
			defer c.ticks.Done()
			defer func() { done <- struct{}{} }()
			defer e.ticking.Store(false)
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), TickDeadline)
			defer cancel()
			c.tick(tctx, v, e, now, ticked)
		}()
	}
	for range begun {
		select {
		case <-done:
		case <-ctx.Done():
			return
		}
	}
}

// tick refreshes voucher v's room, entry e.
func (c *Cache) tick(ctx context.Context, v int64, e *Cached, now time.Time, ticked func(v int64, s *Snapshot, err error)) {
	told := e.takeTold()
	s, err := c.store.Tick(ctx, v, now, told...)
	switch {
	case Gone(err):
		c.Forget(v)
		c.NoRoom(v, err)
	case err == nil:
		e.Set(s, nil)
	default: // not recorded: with the next tick
		e.tell(told...)
	}
	ticked(v, s, err)
}

// Wait waits for the rooms' ticks under way to end.
func (c *Cache) Wait() { c.ticks.Wait() }
