package gateway

// The routes: which handler answers which request, on which listener.

import (
	"net/http"

	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/gateway/operator"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Handler is the gateway's public HTTP handler: the user API, and the
// admin API too unless FLASHSALE_ADMIN_ADDR gives it a listener of its own
// (then /admin/… answers 404 here).
func (g *Gateway) Handler() http.Handler { return g.handler(true, g.cfg.AdminAddr == "") }

// AdminHandler is the admin API alone, for FLASHSALE_ADMIN_ADDR.
func (g *Gateway) AdminHandler() http.Handler { return g.handler(false, true) }

func (g *Gateway) handler(users, admin bool) http.Handler {
	mux := http.NewServeMux()
	byPattern := map[string]methods{}
	var patterns []string
	for _, rt := range g.routes() {
		if (rt.admin && !admin) || (!rt.admin && !users) {
			continue
		}
		if byPattern[rt.pattern] == nil {
			byPattern[rt.pattern] = methods{}
			patterns = append(patterns, rt.pattern)
		}
		byPattern[rt.pattern][rt.method] = g.routed(rt)
	}
	for _, p := range patterns {
		mux.Handle(p, byPattern[p])
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" && r.Method == http.MethodGet && users { // the index: a person's first look
			operator.ServeIndex(w, r)
			return
		}
		httpapi.WriteError(w, httpapi.NewError(http.StatusNotFound, "not_found", "no such endpoint"))
	})
	var routed http.Handler = mux
	if users {
		routed = g.pollsFirst(mux)
	}
	h := g.recoverer(g.shed(routed))
	if g.cfg.Tracing {
		// A span per request, named by its route, continuing the caller's
		// trace (traceparent); off by default: it costs every claim.
		// The span is renamed to its route once routed (see routed).
		h = otelhttp.NewHandler(h, "gateway")
	}
	return h
}

// routed names the request's span after its route, when tracing: a span
// name per route, not per order id.
func (g *Gateway) routed(rt route) http.HandlerFunc {
	if !g.cfg.Tracing {
		return rt.h
	}
	name := rt.method + " " + rt.pattern
	return func(w http.ResponseWriter, r *http.Request) {
		trace.SpanFromContext(r.Context()).SetName(name)
		rt.h(w, r)
	}
}

// route is one endpoint of the API (api/openapi.yaml lists them all).
type route struct {
	method, pattern string
	admin           bool
	h               http.HandlerFunc
}

// routes are the gateway's endpoints, the admin API's last. Every one
// that waits on MySQL is bounded in time and number.
func (g *Gateway) routes() []route {
	rts := []route{
		{http.MethodPost, "/v1/vouchers/{id}/orders", false, g.claim},
		{http.MethodGet, "/v1/vouchers/{id}/claims/{claim_id}", false, g.mysqlBound(g.getClaim)},
		{http.MethodGet, "/v1/vouchers/{id}/draw", false, g.mysqlBound(g.getDraw)},
		{http.MethodGet, "/v1/challenge", false, g.getChallenge},
		{http.MethodPost, "/v1/vouchers/{id}/queue", false, g.joinQueue},
		{http.MethodGet, "/v1/vouchers/{id}/queue", false, g.getQueue},
		{http.MethodGet, "/v1/orders", false, g.mysqlBound(g.listOrders)},
		{http.MethodGet, "/v1/orders/{id}", false, g.mysqlBound(g.getOrder)},
		{http.MethodPost, "/v1/orders/{id}/pay", false, g.buyerPay(g.mysqlBound(g.payOrder))},
		{http.MethodPost, "/v1/orders/{id}/cancel", false, g.mysqlBound(g.cancelOrder)},
		{http.MethodPost, "/v1/payments/webhook", false, g.paymentWebhook}, // takes its slot once verified
		{http.MethodGet, "/queue/{id}", false, g.serveQueuePage},
		{http.MethodGet, "/queue/assets/{name}", false, g.serveQueueAsset},
		{http.MethodGet, "/openapi.yaml", false, operator.ServeOpenAPI},
	}
	for _, rt := range g.ops.Routes() {
		h := rt.H
		if rt.MySQL {
			check, slots := g.admin, g.adminSlots
			if rt.Reader {
				check, slots = g.eventsReader, g.eventsSlots
			}
			h = g.operatorBound(check, slots, max(rt.Timeout, g.cfg.MySQLTimeout), h)
		}
		rts = append(rts, route{rt.Method, rt.Pattern, true, h})
	}
	return rts
}

// methods dispatches by HTTP method and answers others with a JSON 405.
type methods map[string]http.HandlerFunc

func (m methods) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h, ok := m[r.Method]; ok {
		h(w, r)
		return
	}
	for method := range m {
		w.Header().Set("Allow", method)
	}
	httpapi.WriteError(w, httpapi.NewError(http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed here"))
}

func (g *Gateway) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				g.log.Error("panic in handler", zap.Any("panic", v), zap.String("path", r.URL.Path), zap.Stack("stack"))
				httpapi.WriteError(w, errInternal)
			}
		}()
		next.ServeHTTP(w, r)
	})
}
