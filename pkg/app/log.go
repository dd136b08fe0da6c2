package app

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/flashsale/flashsale/pkg/ops"
)

// NewLoggers returns the process logger (zap production settings, JSON on
// stderr, sampled) and the audit logger (same encoding, never sampled;
// zap.NewNop() unless audit). format is json, gcp or ecs: the field names
// and types each log pipeline indexes (see formatCore).
func NewLoggers(level, format string, audit bool) (log, auditLog *zap.Logger, err error) {
	return newLoggers(zapcore.Lock(os.Stderr), level, format, audit)
}

func newLoggers(sink zapcore.WriteSyncer, level, format string, audit bool) (log, auditLog *zap.Logger, err error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, nil, fmt.Errorf("FLASHSALE_LOG_LEVEL: %w", err)
	}
	enc, fields, err := encoderConfig(format)
	if err != nil {
		return nil, nil, err
	}
	ops.SetLogFormat(format)
	build := func(l zapcore.LevelEnabler, sampled bool) *zap.Logger {
		var core zapcore.Core = formatCore{Core: zapcore.NewCore(zapcore.NewJSONEncoder(enc), sink, l), format: format}
		if sampled { // zap's production sampling
			core = zapcore.NewSamplerWithOptions(core, time.Second, 100, 100)
		}
		var initial []zap.Field
		for k, v := range fields {
			initial = append(initial, zap.Any(k, v))
		}
		return zap.New(core, zap.AddCaller(), zap.ErrorOutput(sink), zap.Fields(initial...))
	}
	log = build(lvl, true)
	if !audit {
		return log, zap.NewNop(), nil
	}
	return log, build(zapcore.InfoLevel, false).Named("audit"), nil
}

func encoderConfig(format string) (zapcore.EncoderConfig, map[string]any, error) {
	enc := zap.NewProductionEncoderConfig()
	switch format {
	case "", "json":
		return enc, nil, nil
	case "gcp":
		enc.TimeKey, enc.EncodeTime = "time", zapcore.RFC3339NanoTimeEncoder
		enc.LevelKey, enc.EncodeLevel = "severity", gcpSeverity
		enc.MessageKey = "message"
		// The caller goes into logging.googleapis.com/sourceLocation, an
		// object (formatCore).
		enc.CallerKey = zapcore.OmitKey
		return enc, nil, nil
	case "ecs":
		enc.TimeKey, enc.EncodeTime = "@timestamp", zapcore.RFC3339NanoTimeEncoder
		enc.LevelKey = "log.level"
		enc.MessageKey = "message"
		enc.NameKey = "log.logger"
		// The caller goes into log.origin.file.name (a keyword),
		// log.origin.file.line (a number) and log.origin.function, as ECS
		// types them (formatCore).
		enc.CallerKey = zapcore.OmitKey
		return enc, map[string]any{"ecs.version": "1.6.0"}, nil
	default:
		return enc, nil, fmt.Errorf("FLASHSALE_LOG_FORMAT: %q is not json, gcp or ecs", format)
	}
}

// formatCore writes what a format's pipeline indexes with the types it
// expects, where zap's encoder cannot:
//   - every format: an id (a field named id, or ending in _id) as a
//     string, as the API writes ids, and any other integer past 2^53 as
//     a string too: a JSON reader (jq, JavaScript, most log stores)
//     reads a larger number as a double and rounds it, so the order id a
//     customer quotes would not be found (logIDs);
//   - gcp: logging.googleapis.com/sourceLocation {file, line, function}
//     (Cloud Logging's structured-logging fields);
//   - ecs: log.origin.file.name, log.origin.file.line (a number),
//     log.origin.function, and an error as error.message (ECS maps error
//     as an object; zap writes a string under "error").
type formatCore struct {
	zapcore.Core
	format string
}

func (c formatCore) With(fields []zapcore.Field) zapcore.Core {
	return formatCore{Core: c.Core.With(c.rewrite(fields)), format: c.format}
}

func (c formatCore) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(ent.Level) {
		return ce.AddCore(ent, c)
	}
	return ce
}

func (c formatCore) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	fields = c.rewrite(fields)
	if ent.Caller.Defined {
		switch c.format {
		case "gcp":
			fields = append(fields, zap.Object("logging.googleapis.com/sourceLocation", sourceLocation(ent.Caller)))
		case "ecs":
			fields = append(fields, zap.String("log.origin.file.name", ent.Caller.TrimmedPath()),
				zap.Int("log.origin.file.line", ent.Caller.Line), zap.String("log.origin.function", ent.Caller.Function))
		}
	}
	return c.Core.Write(ent, fields)
}

// rewrite writes ids as strings (logIDs), and, for ECS, zap's error
// field as error.message.
func (c formatCore) rewrite(fields []zapcore.Field) []zapcore.Field {
	var out []zapcore.Field // a copy, once there is something to change
	for i, f := range fields {
		g, changed := logID(f)
		if err, ok := f.Interface.(error); ok && c.format == "ecs" && f.Type == zapcore.ErrorType && f.Key == "error" {
			g, changed = zap.String("error.message", err.Error()), true
		}
		if changed {
			if out == nil {
				out = append([]zapcore.Field(nil), fields...)
			}
			out[i] = g
		}
	}
	if out == nil {
		return fields
	}
	return out
}

// maxExactInt is 2^53: past it a double, which a JSON reader makes of a
// number, no longer holds every integer.
const maxExactInt = 1 << 53

// logID is f written as a string when it is an integer naming an id (a
// key of id or ending in _id: ids are strings, whatever their size, so a
// pipeline sees one type) or past 2^53; false when f is written as it is.
func logID(f zapcore.Field) (zapcore.Field, bool) {
	switch f.Type {
	case zapcore.Int64Type, zapcore.Int32Type, zapcore.Int16Type, zapcore.Int8Type:
		if isIDKey(f.Key) || f.Integer > maxExactInt || f.Integer < -maxExactInt {
			return zap.String(f.Key, strconv.FormatInt(f.Integer, 10)), true
		}
	case zapcore.Uint64Type, zapcore.Uint32Type, zapcore.Uint16Type, zapcore.Uint8Type, zapcore.UintptrType:
		if isIDKey(f.Key) || uint64(f.Integer) > maxExactInt {
			return zap.String(f.Key, strconv.FormatUint(uint64(f.Integer), 10)), true
		}
	}
	return f, false
}

// isIDKey reports whether a field's key names an id.
func isIDKey(k string) bool { return k == "id" || strings.HasSuffix(k, "_id") }

type sourceLocation zapcore.EntryCaller

func (l sourceLocation) MarshalLogObject(e zapcore.ObjectEncoder) error {
	e.AddString("file", zapcore.EntryCaller(l).TrimmedPath())
	e.AddString("line", strconv.Itoa(l.Line)) // Cloud Logging's LogEntrySourceLocation.line is an int64 in JSON: a string
	e.AddString("function", l.Function)
	return nil
}

// gcpSeverity writes the severity names Cloud Logging knows.
func gcpSeverity(l zapcore.Level, e zapcore.PrimitiveArrayEncoder) {
	switch l {
	case zapcore.DebugLevel:
		e.AppendString("DEBUG")
	case zapcore.InfoLevel:
		e.AppendString("INFO")
	case zapcore.WarnLevel:
		e.AppendString("WARNING")
	case zapcore.ErrorLevel:
		e.AppendString("ERROR")
	case zapcore.DPanicLevel, zapcore.PanicLevel:
		e.AppendString("CRITICAL")
	default:
		e.AppendString("ALERT")
	}
}

// redisLogger writes go-redis's log lines through zap, as warnings: go-redis
// logs only trouble (a dial that failed, a connection it dropped).
type redisLogger struct{ log *zap.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn(fmt.Sprintf(format, v...))
}
