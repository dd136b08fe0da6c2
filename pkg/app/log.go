package app

import (
	"context"
	"fmt"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// NewLoggers returns the process logger (zap production settings, JSON on
// stderr, sampled) and the audit logger (same encoding, never sampled;
// zap.NewNop() unless audit). format is json, gcp or ecs.
func NewLoggers(level, format string, audit bool) (log, auditLog *zap.Logger, err error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, nil, fmt.Errorf("FLASHSALE_LOG_LEVEL: %w", err)
	}
	enc, fields, err := encoderConfig(format)
	if err != nil {
		return nil, nil, err
	}
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.DisableStacktrace = true
	cfg.EncoderConfig = enc
	cfg.InitialFields = fields
	if log, err = cfg.Build(); err != nil {
		return nil, nil, err
	}
	if !audit {
		return log, zap.NewNop(), nil
	}
	cfg.Sampling = nil
	cfg.Level = zap.NewAtomicLevelAt(zapcore.InfoLevel)
	auditLog, err = cfg.Build()
	if err != nil {
		return nil, nil, err
	}
	return log, auditLog.Named("audit"), nil
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
		return enc, nil, nil
	case "ecs":
		enc.TimeKey, enc.EncodeTime = "@timestamp", zapcore.RFC3339NanoTimeEncoder
		enc.LevelKey = "log.level"
		enc.MessageKey = "message"
		enc.NameKey = "log.logger"
		// ECS types log.origin.file.line as a number; zap writes the
		// caller as one string (file.go:123), which is what
		// log.origin.file.name (a keyword) may hold.
		enc.CallerKey = "log.origin.file.name"
		return enc, map[string]any{"ecs.version": "1.6.0"}, nil
	default:
		return enc, nil, fmt.Errorf("FLASHSALE_LOG_FORMAT: %q is not json, gcp or ecs", format)
	}
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
