package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/flashsale/flashsale/pkg/ops"
)

func TestLogFormats(t *testing.T) {
	at := time.Date(2026, 11, 21, 13, 0, 0, 0, time.UTC) // fixed date: a log line's formatting; nothing is stored.
	tests := []struct {
		format string
		want   map[string]any
	}{
		{"json", map[string]any{"level": "warn", "msg": "hello", "ts": float64(at.UnixNano()) / 1e9}},
		{"gcp", map[string]any{"severity": "WARNING", "message": "hello", "time": "2026-11-21T13:00:00Z"}},                             // fixed date: the formatted at.
		{"ecs", map[string]any{"log.level": "warn", "message": "hello", "@timestamp": "2026-11-21T13:00:00Z", "ecs.version": "1.6.0"}}, // fixed date: the formatted at.
	}
	for _, tt := range tests {
		t.Run(tt.format, func(t *testing.T) {
			enc, fields, err := encoderConfig(tt.format)
			require.NoError(t, err)
			e := zapcore.NewJSONEncoder(enc)
			var zf []zapcore.Field
			for k, v := range fields {
				zf = append(zf, zapcore.Field{Key: k, Type: zapcore.StringType, String: v.(string)})
			}
			buf, err := e.EncodeEntry(zapcore.Entry{Level: zapcore.WarnLevel, Time: at, Message: "hello"}, zf)
			require.NoError(t, err)
			var got map[string]any
			require.NoError(t, json.Unmarshal(buf.Bytes(), &got))
			for k, v := range tt.want {
				require.Equal(t, v, got[k], "%s in %s", k, buf.String())
			}
		})
	}
	_, _, err := NewLoggers("info", "xml", true)
	require.ErrorContains(t, err, "FLASHSALE_LOG_FORMAT")
	_, _, err = NewLoggers("loud", "json", true)
	require.ErrorContains(t, err, "FLASHSALE_LOG_LEVEL")
}

// go-redis's own lines come out as zap JSON, never plain text.
func TestRedisLinesGoThroughZap(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	redisLogger{zap.New(core).Named("redis")}.Printf(context.Background(), "redis: %s failed", "dial")
	require.Equal(t, 1, logs.Len())
	e := logs.All()[0]
	require.Equal(t, "redis: dial failed", e.Message)
	require.Equal(t, "redis", e.LoggerName)
	require.Equal(t, zap.WarnLevel, e.Level)
}

// Each format's fields have the types its pipeline indexes:
// ECS's log.origin.file.line a number and error an object (error.message),
// Cloud Logging's sourceLocation an object; and every format carries the
// active span's trace and span ids, under its own names.
func TestLogFieldTypes(t *testing.T) {
	line := func(format string, log func(*zap.Logger)) map[string]any {
		t.Helper()
		var buf bytes.Buffer
		l, _, err := newLoggers(zapcore.AddSync(&buf), "info", format, false)
		require.NoError(t, err)
		log(l)
		var got map[string]any
		require.NoError(t, json.Unmarshal(buf.Bytes(), &got), buf.String())
		return got
	}
	ecs := line("ecs", func(l *zap.Logger) { l.Error("boom", zap.Error(errors.New("disk full")), zap.Int("n", 3)) })
	require.IsType(t, float64(0), ecs["log.origin.file.line"], "a number: %v", ecs)
	require.Contains(t, ecs["log.origin.file.name"], "app/log_test.go")
	require.Contains(t, ecs["log.origin.function"], "TestLogFieldTypes")
	require.Equal(t, "disk full", ecs["error.message"])
	require.NotContains(t, ecs, "error", "ECS maps error as an object")
	require.NotContains(t, ecs, "caller")
	require.EqualValues(t, 3, ecs["n"])
	withErr := line("ecs", func(l *zap.Logger) { l.With(zap.Error(errors.New("early"))).Warn("later") })
	require.Equal(t, "early", withErr["error.message"], "an error given to With too")

	gcp := line("gcp", func(l *zap.Logger) { l.Warn("hello") })
	loc, ok := gcp["logging.googleapis.com/sourceLocation"].(map[string]any)
	require.True(t, ok, "an object: %v", gcp)
	require.Contains(t, loc["file"], "app/log_test.go")
	require.NotEmpty(t, loc["line"])
	require.Contains(t, loc["function"], "TestLogFieldTypes")
	require.NotContains(t, gcp, "caller")

	plain := line("json", func(l *zap.Logger) { l.Info("hi") })
	require.Contains(t, plain["caller"], "app/log_test.go", "json keeps zap's caller")

	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	for format, keys := range map[string][2]string{
		"json": {"trace_id", "span_id"},
		"ecs":  {"trace.id", "span.id"},
		"gcp":  {"logging.googleapis.com/trace", "logging.googleapis.com/spanId"},
	} {
		got := line(format, func(l *zap.Logger) { l.Info("traced", ops.TraceFields(ctx)...) })
		require.Equal(t, sc.TraceID().String(), got[keys[0]], format)
		require.Equal(t, sc.SpanID().String(), got[keys[1]], format)
	}
	require.Empty(t, ops.TraceFields(context.Background()), "no span, no fields")
}
