package db

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"
)

// TracingPlugin makes every statement a span of the global tracer
// provider: "mysql <operation>", with the statement's SQL as written
// (placeholders, not values: those carry user ids). Written here rather
// than taken from gorm.io/plugin/opentelemetry, which links the drivers
// of four other databases into every binary.
func TracingPlugin() gorm.Plugin { return tracingPlugin{} }

type tracingPlugin struct{}

func (tracingPlugin) Name() string { return "flashsale:tracing" }

const spanKey = "flashsale:span"

func (tracingPlugin) Initialize(db *gorm.DB) error {
	tracer := otel.Tracer("github.com/flashsale/flashsale/pkg/db")
	before := func(op string) func(*gorm.DB) {
		return func(tx *gorm.DB) {
			ctx, span := tracer.Start(tx.Statement.Context, "mysql "+op, trace.WithSpanKind(trace.SpanKindClient),
				trace.WithAttributes(attribute.String("db.system", "mysql")))
			tx.Statement.Context = ctx
			tx.InstanceSet(spanKey, span)
		}
	}
	after := func(tx *gorm.DB) {
		v, ok := tx.InstanceGet(spanKey)
		if !ok {
			return
		}
		span := v.(trace.Span)
		span.SetAttributes(attribute.String("db.statement", tx.Statement.SQL.String()), attribute.Int64("db.rows_affected", tx.RowsAffected))
		if tx.Error != nil && tx.Error != gorm.ErrRecordNotFound {
			span.RecordError(tx.Error)
			span.SetStatus(codes.Error, tx.Error.Error())
		}
		span.End()
	}
	cb := db.Callback()
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	add(cb.Create().Before("gorm:create").Register("flashsale:trace_create", before("insert")))
	add(cb.Create().After("gorm:create").Register("flashsale:trace_create_end", after))
	add(cb.Query().Before("gorm:query").Register("flashsale:trace_query", before("select")))
	add(cb.Query().After("gorm:query").Register("flashsale:trace_query_end", after))
	add(cb.Update().Before("gorm:update").Register("flashsale:trace_update", before("update")))
	add(cb.Update().After("gorm:update").Register("flashsale:trace_update_end", after))
	add(cb.Delete().Before("gorm:delete").Register("flashsale:trace_delete", before("delete")))
	add(cb.Delete().After("gorm:delete").Register("flashsale:trace_delete_end", after))
	add(cb.Row().Before("gorm:row").Register("flashsale:trace_row", before("row")))
	add(cb.Row().After("gorm:row").Register("flashsale:trace_row_end", after))
	add(cb.Raw().Before("gorm:raw").Register("flashsale:trace_raw", before("exec")))
	add(cb.Raw().After("gorm:raw").Register("flashsale:trace_raw_end", after))
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}
