package ops

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// logFormat is the format of the process's loggers (SetLogFormat), for
// TraceFields.
var logFormat atomic.Value

// SetLogFormat records the loggers' format (json, gcp, ecs): pkg/app's
// loggers call it when they are made.
func SetLogFormat(format string) { logFormat.Store(format) }

// TraceFields are the fields that tie a log line to the span active in ctx
// (none without one), named as the loggers' format wants them: json
// trace_id and span_id; gcp logging.googleapis.com/trace and spanId; ecs
// trace.id and span.id. The roles call it without importing the
// binaries' wiring (pkg/app).
func TraceFields(ctx context.Context) []zap.Field {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	tid, sid := sc.TraceID().String(), sc.SpanID().String()
	switch f, _ := logFormat.Load().(string); f {
	case "gcp":
		return []zap.Field{zap.String("logging.googleapis.com/trace", tid), zap.String("logging.googleapis.com/spanId", sid),
			zap.Bool("logging.googleapis.com/trace_sampled", sc.IsSampled())}
	case "ecs":
		return []zap.Field{zap.String("trace.id", tid), zap.String("span.id", sid)}
	default:
		return []zap.Field{zap.String("trace_id", tid), zap.String("span_id", sid)}
	}
}
