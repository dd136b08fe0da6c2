package ops

// Each role's counts in its log: one line every CountsEvery of what it did
// since the last line, nothing when it did nothing.

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
)

// CountsEvery is how often a role logs its counts.
const CountsEvery = 10 * time.Second

// logCounts logs msg at Info every interval until ctx ends, with the
// growth of each of counts' values since last (then since the last line)
// as its fields (a key that did not grow is left out), and no line when
// nothing grew.
func logCounts(ctx context.Context, log *zap.Logger, interval time.Duration, msg string, counts func() map[string]int64, last map[string]int64) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := counts()
		var fields []zap.Field
		for _, k := range slices.Sorted(maps.Keys(now)) {
			if d := now[k] - last[k]; d > 0 {
				fields = append(fields, zap.Int64(k, d))
			}
		}
		last = now
		if len(fields) > 0 {
			log.Info(msg, append(fields, zap.Duration("over", interval))...)
		}
	}
}

// StartCounts logs msg at Info every interval, until the returned stop
// is called (or ctx ends), with the growth of each of counts' values
// since the last line as its fields (a key that did not grow is left
// out), and no line when nothing grew. What grows once it has returned is
// counted: the first reading is taken before it returns, not when its
// goroutine first runs. stop waits for its last line.
func StartCounts(ctx context.Context, log *zap.Logger, interval time.Duration, msg string, counts func() map[string]int64) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	last := counts()
	go func() {
		defer close(done)
		logCounts(ctx, log, interval, msg, counts, last)
	}()
	return func() { cancel(); <-done }
}

// CounterValue is c's value now.
func CounterValue(c prometheus.Counter) int64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return int64(m.GetCounter().GetValue())
}
