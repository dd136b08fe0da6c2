package app

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestLogFormats(t *testing.T) {
	// fixed date: a log line's formatting; nothing is stored.
	at := time.Date(2026, 11, 21, 13, 0, 0, 0, time.UTC)
	tests := []struct {
		format string
		want   map[string]any
	}{
		{"json", map[string]any{"level": "warn", "msg": "hello", "ts": float64(at.UnixNano()) / 1e9}},
		// fixed date: the formatted at.
		{"gcp", map[string]any{"severity": "WARNING", "message": "hello", "time": "2026-11-21T13:00:00Z"}},
		// fixed date: the formatted at.
		{"ecs", map[string]any{"log.level": "warn", "message": "hello", "@timestamp": "2026-11-21T13:00:00Z", "ecs.version": "1.6.0"}},
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
