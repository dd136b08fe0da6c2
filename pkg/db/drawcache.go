package db

import (
	"context"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// DrawFiguresCache answers DrawFiguresOf from a copy a short while old.
// The figures are a scan of the draw's entries (tens of milliseconds at
// 70,000 entries, growing with the sale), and anyone with a user token may
// ask for them: 80 callers, each under its rate limit, held every MySQL
// slot of a gateway. Here one scan serves every caller of a voucher for a
// while, and callers who find the copy stale while a scan runs wait for
// that one.
type DrawFiguresCache struct {
	s      *Store
	flight singleflight.Group
	mu     sync.Mutex
	copies map[int64]figuresCopy
}

type figuresCopy struct {
	f     DrawFigures
	until time.Time
}

// A copy of the figures is served for the longer of DrawFiguresMinAge and
// drawFiguresCost times the scan it came from took (at most
// DrawFiguresMaxAge), so that these reads keep at most 1/drawFiguresCost
// of one MySQL connection busy, per draw and gateway, up to draws of a
// scan of 1.5 s.
const (
	DrawFiguresMinAge = time.Second
	DrawFiguresMaxAge = 30 * time.Second
	drawFiguresCost   = 20
	// drawFiguresKept bounds the copies kept before the stale ones are
	// dropped (draws on sale at once are few).
	drawFiguresKept = 256
)

// NewDrawFiguresCache returns a cache over s.
func NewDrawFiguresCache(s *Store) *DrawFiguresCache {
	return &DrawFiguresCache{s: s, copies: map[int64]figuresCopy{}}
}

// Get returns voucher v's figures as of at most a short while before now.
func (c *DrawFiguresCache) Get(ctx context.Context, v int64, now time.Time) (DrawFigures, error) {
	c.mu.Lock()
	cp, ok := c.copies[v]
	c.mu.Unlock()
	if ok && now.Before(cp.until) {
		return cp.f, nil
	}
	res, err, _ := c.flight.Do(strconv.FormatInt(v, 10), func() (any, error) {
		t0 := time.Now()
		f, err := c.s.DrawFiguresOf(ctx, v)
		if err != nil {
			return f, err
		}
		c.keep(v, figuresCopy{f: f, until: now.Add(min(max(DrawFiguresMinAge, drawFiguresCost*time.Since(t0)), DrawFiguresMaxAge))}, now)
		return f, nil
	})
	return res.(DrawFigures), err
}

// keep stores v's copy, dropping the stale ones first when many are kept.
func (c *DrawFiguresCache) keep(v int64, cp figuresCopy, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.copies) >= drawFiguresKept {
		for k, old := range c.copies {
			if !now.Before(old.until) {
				delete(c.copies, k)
			}
		}
	}
	c.copies[v] = cp
}
