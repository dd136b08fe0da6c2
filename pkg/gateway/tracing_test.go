package gateway_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
)

// With FLASHSALE_TRACING_ENDPOINT set, a claim is a trace: the request
// (named by its route), its Redis script, and the MySQL statements of an
// admin read, exported over OTLP/HTTP; statements carry no values.
func TestTracingExportsRequestsRedisAndMySQL(t *testing.T) {
	var mu sync.Mutex
	spans := map[string]string{} // name -> db.statement, if any
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			t.Error(err)
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					stmt := ""
					for _, a := range s.Attributes {
						if a.Key == "db.statement" {
							stmt = a.Value.GetStringValue()
						}
					}
					spans[s.Name] = stmt
				}
			}
		}
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()

	env := testenv.New(t, 2)
	c := env.Common
	c.TracingEndpoint, c.TracingSampleRatio = collector.URL+"/v1/traces", 1
	ctx := context.Background()
	stopTracing, err := c.StartTracing(ctx, "gateway")
	require.NoError(t, err)
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
	rs, err := c.Redis(ctx, 8)
	require.NoError(t, err)
	t.Cleanup(func() { rs.Client().Close() })
	ds, err := c.MySQL(ctx)
	require.NoError(t, err)
	env.RDB, env.DB = rs, ds
	f := newFixtureOn(t, env, gateway.Config{Tracing: true})

	id := f.createVoucher(`{"name":"traced","stock":3}`)
	require.Equal(t, http.StatusAccepted, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("alice"), "").Status)
	require.Equal(t, http.StatusOK, f.do("GET", "/admin/v1/vouchers/"+id, admin, "").Status)
	require.NoError(t, stopTracing(ctx)) // flush

	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, spans, "POST /v1/vouchers/{id}/orders", "the claim, named by its route: %v", spans)
	require.Contains(t, spans, "GET /admin/v1/vouchers/{id}")
	require.Contains(t, spans, "mysql select")
	for name, stmt := range spans {
		require.NotContains(t, stmt, "alice", "%s: no values in statements", name)
	}
	redis := false
	for name := range spans {
		// A claim's EVALSHA goes in a pipeline (rdb.AdmitMany).
		if name == "evalsha" || name == "eval" || name == "redis.pipeline evalsha" {
			redis = true
		}
	}
	require.True(t, redis, "the admission script's command: %v", spans)
}
