package ops

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/flashsale/flashsale/pkg/internal/wait"
)

// A role's counts line says what grew since the last one, at Info, and
// nothing is logged while nothing grows.
func TestCountsLogWhatGrewAndNothingElse(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	var reads, admitted atomic.Int64
	counts := func() map[string]int64 {
		reads.Add(1)
		return map[string]int64{"admitted": admitted.Load(), "rejected:sold_out": 7}
	}
	stop := StartCounts(context.Background(), zap.New(core), 5*time.Millisecond, "claims", counts)
	defer stop()
	wait.For(t, 10*time.Second, "five quiet ticks", func() bool { return reads.Load() >= 6 })
	require.Zero(t, logs.Len(), "nothing grew: no line")

	admitted.Add(3)
	wait.For(t, 10*time.Second, "a line", func() bool { return logs.Len() > 0 })
	line := logs.All()[0]
	require.Equal(t, "claims", line.Message)
	require.Equal(t, zapcore.InfoLevel, line.Level)
	require.Equal(t, int64(3), line.ContextMap()["admitted"])
	require.NotContains(t, line.ContextMap(), "rejected:sold_out", "what did not grow is left out")
	n := reads.Load()
	wait.For(t, 10*time.Second, "more quiet ticks", func() bool { return reads.Load() >= n+5 })
	require.Equal(t, 1, logs.Len(), "one line for one growth")
}

// What grows as soon as StartCounts has returned is in a line: its first
// reading is taken before it returns (a gateway's first claims, served
// right after, were lost when its goroutine took it later).
func TestCountsCountWhatGrowsRightAfterTheStart(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	var admitted atomic.Int64
	stop := StartCounts(context.Background(), zap.New(core), 5*time.Millisecond, "claims",
		func() map[string]int64 { return map[string]int64{"admitted": admitted.Load()} })
	defer stop()
	admitted.Add(2)
	wait.For(t, 10*time.Second, "a line", func() bool { return logs.Len() > 0 })
	require.Equal(t, int64(2), logs.All()[0].ContextMap()["admitted"])
}
