package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
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

// Ids are strings in every format, as the API writes them: an order id
// past 2^53 as a number would be read rounded by jq, JavaScript and most
// log stores, and not found. So is any integer past 2^53; smaller counts
// stay numbers. With and the fields of a line alike.
func TestLogIDsAreStrings(t *testing.T) {
	const order = int64(386349236964294657) // jq reads 386349236964294660
	for _, format := range []string{"json", "gcp", "ecs"} {
		var buf bytes.Buffer
		l, audit, err := newLoggers(zapcore.AddSync(&buf), "info", format, true)
		require.NoError(t, err)
		l.With(zap.Int64("voucher_id", 7)).Info("order cancelled", zap.Int64("order_id", order), zap.Uint64("id", 9),
			zap.Int64("sequence", 1<<60), zap.Int("stock", 250), zap.Int64("upto", 12))
		audit.Info("order created", zap.Int64("order_id", order))
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		require.Len(t, lines, 2, format)
		for _, line := range lines {
			d := json.NewDecoder(strings.NewReader(line))
			d.UseNumber()
			var got map[string]any
			require.NoError(t, d.Decode(&got), line)
			require.Equal(t, "386349236964294657", got["order_id"], "%s: %s", format, line)
			requireNoNumericID(t, got, line)
		}
		var got map[string]any
		require.NoError(t, json.Unmarshal([]byte(lines[0]), &got))
		require.Equal(t, "7", got["voucher_id"], format)
		require.Equal(t, "9", got["id"], format)
		require.Equal(t, "1152921504606846976", got["sequence"], "past 2^53: a string (%s)", format)
		require.EqualValues(t, 250, got["stock"], "a count stays a number (%s)", format)
		require.EqualValues(t, 12, got["upto"], format)
	}
}

// requireNoNumericID fails on a field of a log line that names an id and
// is a number, or any number past 2^53.
func requireNoNumericID(t *testing.T, fields map[string]any, line string) {
	t.Helper()
	for k, v := range fields {
		n, ok := v.(json.Number)
		if !ok {
			if f, isFloat := v.(float64); isFloat {
				n, ok = json.Number(strconv.FormatFloat(f, 'f', -1, 64)), true
			}
		}
		if !ok {
			continue
		}
		require.False(t, isIDKey(k), "%s is a number in %s", k, line)
		i, err := n.Int64()
		require.True(t, err != nil || (i <= maxExactInt && i >= -maxExactInt), "%s is a number past 2^53 in %s", k, line)
	}
}

// README.md's logging section sizes the audit lines ("about 220 bytes
// each"): an "order created" line, its fields persist's (an 18-digit
// order id, a voucher, a user, a partition, the status), is within a
// tenth of that in JSON.
func TestTheAuditLineIsTheSizeTheREADMESays(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	m := regexp.MustCompile(`about (\d+) bytes each`).FindSubmatch(readme)
	require.NotNil(t, m, "README.md sizes the audit lines")
	said, err := strconv.Atoi(string(m[1]))
	require.NoError(t, err)
	var buf bytes.Buffer
	_, audit, err := newLoggers(zapcore.AddSync(&buf), "info", "json", true)
	require.NoError(t, err)
	audit.Info("order created", zap.Int64("order_id", 386349236964294657), zap.Int64("voucher_id", 12),
		zap.String("user_id", "user-0012345"), zap.Int("partition", 3), zap.String("status", "created"))
	require.NoError(t, audit.Sync())
	line := buf.Len()
	t.Logf("an order created line: %d bytes: %s", line, buf.String())
	require.InDelta(t, said, line, float64(said)/10, "README.md's size of an audit line")
}
