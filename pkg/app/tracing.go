package app

import (
	"context"
	"fmt"
	"net/url"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
)

// Tracing is off unless FLASHSALE_TRACING_ENDPOINT names an OTLP/HTTP
// collector: then HTTP requests (otelhttp), Redis commands (redisotel) and
// MySQL statements (gorm's plugin, without their values) become spans,
// sampled at FLASHSALE_TRACING_SAMPLE_RATIO unless the caller's
// traceparent decided.

// TracingEnabled reports whether spans are exported.
func (c Common) TracingEnabled() bool { return c.TracingEndpoint != "" }

// StartTracing installs the global tracer provider of service when tracing
// is enabled and returns what flushes and stops it (a no-op otherwise).
func (c Common) StartTracing(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	if !c.TracingEnabled() {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(c.TracingEndpoint))
	if err != nil {
		return nil, fmt.Errorf("FLASHSALE_TRACING_ENDPOINT: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.TracingSampleRatio))),
		sdktrace.WithResource(resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName("flashsale-"+service))),
	)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return tp.Shutdown, nil
}

func validTracingEndpoint(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}
