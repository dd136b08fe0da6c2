package app

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Tally counts events (claims admitted, orders persisted, ...) instead of
// logging each one, and logs what changed once per period.
type Tally struct {
	mu     sync.Mutex
	counts map[string]*atomic.Int64
}

// NewTally returns an empty Tally.
func NewTally() *Tally { return &Tally{counts: map[string]*atomic.Int64{}} }

// Counter returns the counter called name; keep it and Add to it.
func (t *Tally) Counter(name string) *atomic.Int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.counts[name]
	if !ok {
		c = new(atomic.Int64)
		t.counts[name] = c
	}
	return c
}

// Snapshot returns every counter's current value.
func (t *Tally) Snapshot() map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]int64, len(t.counts))
	for k, c := range t.counts {
		out[k] = c.Load()
	}
	return out
}

// Run logs msg with the counts that grew, every period, until ctx ends, and
// once more at the end.
func (t *Tally) Run(ctx context.Context, log *zap.Logger, msg string, period time.Duration) {
	last := map[string]int64{}
	flush := func() {
		now := t.Snapshot()
		var fields []zap.Field
		keys := make([]string, 0, len(now))
		for k := range now {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if d := now[k] - last[k]; d != 0 {
				fields = append(fields, zap.Int64(k, d))
			}
		}
		last = now
		if len(fields) > 0 {
			log.Info(msg, append(fields, zap.Duration("period", period))...)
		}
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			flush()
			return
		case <-tick.C:
			flush()
		}
	}
}
