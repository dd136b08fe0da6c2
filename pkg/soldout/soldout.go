// Package soldout is the gateway's memory of vouchers Redis said are sold
// out, so that their further claims are answered without Redis.
//
// Pruning before Redis (seed 001's 剪枝): once a voucher is sold out, every
// further claim would still run the admission script, a Redis round trip
// each, though the answer is known. The gateway remembers, per voucher, the
// least quantity Redis answered sold_out for, and answers claims of at
// least that many units itself. Each flag is good for the refresh period
// (FLASHSALE_SOLD_OUT_REFRESH): after it, one claim, and only one, goes to
// Redis again and its answer renews or clears the flag. A unit given back
// (a cancellation, an expiry, a top-up) is thus sold again at most one
// period after it is back (at once on the replica that took the top-up
// or the cancellation). A hot voucher's claim is answered sold_out by
// the store only when all its buckets are dry, so one flag per voucher
// covers its buckets.
//
// A claim carrying an Idempotency-Key is never pruned: it may be the retry
// of an admitted claim, which must be answered with its order. Nor does its
// answer set or renew a flag: keyed claims always reach Redis, so they
// could otherwise keep a flag alive for everyone else.
package soldout

import (
	"sync"
	"sync/atomic"
	"time"
)

// Cache is the flags of one gateway, per voucher.
type Cache struct {
	refresh int64 // nanoseconds; 0: pruning off
	now     func() int64
	flags   sync.Map // voucher id -> *soldFlag
}

type soldFlag struct {
	qty atomic.Int64 // the least quantity Redis answered sold_out for
	at  atomic.Int64 // when the flag was set or last let a claim through
}

// Monotonic is nanoseconds on the monotonic clock, the Cache's clock.
func Monotonic() func() int64 {
	start := time.Now()
	return func() int64 { return int64(time.Since(start)) }
}

// New returns a Cache whose flags last refresh (0 or less: pruning off), on the
// clock now (nanoseconds, Monotonic outside tests).
func New(refresh time.Duration, now func() int64) *Cache {
	return &Cache{refresh: max(int64(refresh), 0), now: now}
}

// Prune reports whether a claim of qty units of voucher v is answered
// sold_out without asking Redis.
func (s *Cache) Prune(v, qty int64) bool {
	if s.refresh == 0 {
		return false
	}
	f, ok := s.flags.Load(v)
	if !ok {
		return false
	}
	fl := f.(*soldFlag)
	if qty < fl.qty.Load() {
		return false
	}
	at, now := fl.at.Load(), s.now()
	if now-at < s.refresh {
		return true
	}
	// Stale: this claim asks Redis (its answer sets the flag anew); the
	// claims meanwhile are still pruned.
	return !fl.at.CompareAndSwap(at, now)
}

// SoldOutFor records Redis's sold_out answer to a claim of qty units. It
// sets or renews the flag only for what the answer proves: fewer than qty
// units left says claims of qty or more are sold out, nothing about fewer.
// So a sold_out for more units than the flag covers leaves the flag to
// expire: otherwise one account claiming more units than are left would
// keep a voucher with units back "sold out" for everyone.
func (s *Cache) SoldOutFor(v, qty int64) {
	if s.refresh == 0 {
		return
	}
	f, _ := s.flags.LoadOrStore(v, &soldFlag{})
	fl := f.(*soldFlag)
	for {
		q := fl.qty.Load()
		if q != 0 && q < qty {
			return // says nothing of claims of q units
		}
		if q == qty || fl.qty.CompareAndSwap(q, qty) {
			break
		}
	}
	fl.at.Store(s.now())
}

// Admitted records an admission, or units given back through this
// replica (a top-up, a cancellation): the voucher is not sold out.
func (s *Cache) Admitted(v int64) {
	if s.refresh == 0 {
		return
	}
	if _, ok := s.flags.Load(v); ok {
		s.flags.Delete(v)
	}
}

// Sweep forgets the flags not renewed for a minute: vouchers nobody
// claims any more.
func (s *Cache) Sweep() {
	if s.refresh == 0 {
		return
	}
	old := s.now() - int64(time.Minute)
	s.flags.Range(func(k, f any) bool {
		if f.(*soldFlag).at.Load() < old {
			s.flags.Delete(k)
		}
		return true
	})
}

// Refresh is how long a flag lasts; 0: pruning is off.
func (s *Cache) Refresh() time.Duration { return time.Duration(s.refresh) }

// SetClock replaces the cache's clock (nanoseconds), for tests.
func (s *Cache) SetClock(now func() int64) { s.now = now }
