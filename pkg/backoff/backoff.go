// Package backoff is the one retry pause of flashsale: exponential, with
// jitter, capped, and interrupted by its context. Every retry loop of the
// worker, the reaper and start-up uses it, so they all back off alike.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Defaults of a Backoff.
const (
	MinDefault = 100 * time.Millisecond
	MaxDefault = 5 * time.Second
)

// Backoff is the pause before the next attempt: it starts at Min and
// doubles after each Wait up to Max. Each pause is jittered by up to -20%
// so processes that failed together do not retry together. Not safe for
// concurrent use; each retry loop has its own.
type Backoff struct {
	Min, Max time.Duration
	cur      time.Duration
}

// New returns a Backoff from lo to hi (zero values take the defaults).
func New(lo, hi time.Duration) *Backoff {
	if lo <= 0 {
		lo = MinDefault
	}
	if hi < lo {
		hi = max(lo, MaxDefault)
	}
	return &Backoff{Min: lo, Max: hi}
}

// Next returns the pause to take now and advances to the next one.
func (b *Backoff) Next() time.Duration {
	if b.cur < b.Min {
		b.cur = b.Min
	}
	d := b.cur
	b.cur = min(2*b.cur, b.Max)
	return d - time.Duration(rand.Float64()*0.2*float64(d))
}

// Reset starts again from Min (after a success).
func (b *Backoff) Reset() { b.cur = 0 }

// Wait pauses for Next, or until ctx ends, in which case it returns
// ctx's error.
func (b *Backoff) Wait(ctx context.Context) error { return Sleep(ctx, b.Next()) }

// Sleep pauses for d or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
