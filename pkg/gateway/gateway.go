// Package gateway is flashsale's HTTP front: it admits claims with one Redis
// script per request (never touching MySQL on that path), and serves the
// order and admin APIs.
package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/access"
	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/history"
	"github.com/flashsale/flashsale/pkg/ops"
	"github.com/flashsale/flashsale/pkg/proof"
	"github.com/flashsale/flashsale/pkg/ratelimit"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/room"
	"github.com/flashsale/flashsale/pkg/soldout"
	"github.com/flashsale/flashsale/pkg/token"
)

// Gateway serves the HTTP API.
type Gateway struct {
	cfg   Config
	loc   *time.Location
	now   func() time.Time
	redis *rdb.Store
	db    *db.Store
	auth  *auth
	pow   *proof.Issuer // proof-of-work challenges and their verification
	// access makes and checks access codes (pkg/access).
	access *access.Codes
	// rooms are the waiting rooms served, each one's last state
	// (pkg/room's Cache, refreshed by roomTick); queueTokens signs their
	// waiters' tokens.
	countsEvery time.Duration // how often the claims' counts are logged
	rooms       *room.Cache
	queueTokens *room.Tokens
	stopRooms   func()
	log         *zap.Logger
	metrics     *metrics
	reg         prometheus.Registerer
	// admit is the Redis admission: through the batcher, or direct.
	admit   func(context.Context, rdb.Claim) (rdb.Admission, error)
	batcher *rdb.Batcher
	// soldOut answers claims of vouchers Redis said are sold out (pkg/soldout).
	soldOut *soldout.Cache
	// refused counts refused claims per voucher for sales' reports;
	// replica names this replica in them (report.go).
	refused refusals
	replica string
	// drawFigures are the draws' figures, a scan each, shared a while.
	drawFigures *db.DrawFiguresCache
	// pageNames are the names the queue page shows (queuepage.go).
	pageNames pageNames
	// history is what the console charts (pkg/history).
	history     *history.Sampler
	stopHistory func()
	// mysqlSlots bounds the requests waiting on MySQL (MySQLMaxInflight).
	mysqlSlots chan struct{}
	// users, addrs and pages are the rate limits (nil: off); inflight
	// counts the requests being served (MaxInflight).
	users, addrs, pages *ratelimit.Keyed
	// adminFails holds the failed admin authentications per address.
	adminFails *ratelimit.Keyed
	trusted    []netip.Prefix
	inflight   atomic.Int64
	stopSweep  func()
}

// Option changes a Gateway.
type Option func(*Gateway)

// withPruneClock replaces the monotonic clock of sold-out pruning, for
// tests (nanoseconds).
func withPruneClock(now func() int64) Option {
	return func(g *Gateway) { g.soldOut.SetClock(now) }
}

// WithCountsEvery logs the claims' counts every d instead of
// ops.CountsEvery, for tests.
func WithCountsEvery(d time.Duration) Option { return func(g *Gateway) { g.countsEvery = d } }

// WithClock replaces time.Now, for tests.
func WithClock(now func() time.Time) Option { return func(g *Gateway) { g.now = now } }

// WithRegistry registers the gateway's metrics with reg (default: a
// registry of its own, unexposed).
func WithRegistry(reg prometheus.Registerer) Option { return func(g *Gateway) { g.reg = reg } }

// New returns a Gateway. The clock is time.Now unless WithClock says otherwise.
//
// A cfg the caller validated (SetDefaults, then Validate: the binary does)
// is used as it is; any other is defaulted and validated here.
func New(cfg Config, r *rdb.Store, d *db.Store, log *zap.Logger, opts ...Option) (*Gateway, error) {
	if cfg.valid == nil {
		cfg.SetDefaults()
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
	}
	loc, trusted := cfg.valid.loc, cfg.valid.trusted
	if log == nil {
		log = zap.NewNop()
	}
	g := &Gateway{cfg: cfg, loc: loc, now: time.Now, redis: r, db: d, log: log.Named("gateway"), reg: prometheus.NewRegistry(),
		mysqlSlots: make(chan struct{}, cfg.MySQLMaxInflight), trusted: trusted,
		users: ratelimit.New(cfg.UserRate, cfg.UserBurst), addrs: ratelimit.New(cfg.IPRate, cfg.IPBurst),
		pages:      ratelimit.New(cfg.QueuePageRate, max(1, int(math.Ceil(2*cfg.QueuePageRate)))),
		adminFails: ratelimit.New(float64(time.Second)/float64(adminFailEvery), adminFailBurst),
		soldOut:    soldout.New(cfg.SoldOutRefresh, soldout.Monotonic()), replica: replicaName()}
	g.refused.since = time.Now()
	if d != nil {
		g.drawFigures = db.NewDrawFiguresCache(d)
	}
	for _, o := range opts {
		o(g)
	}
	g.metrics = newMetrics(g.reg)
	if r != nil {
		if err := r.SetDurability(cfg.durability()); err != nil {
			return nil, err
		}
	}
	g.admit = func(ctx context.Context, c rdb.Claim) (rdb.Admission, error) {
		ctx, cancel := context.WithTimeout(ctx, cfg.ClaimTimeout)
		defer cancel()
		return r.Admit(ctx, c)
	}
	if cfg.PipelineWorkers > 0 { // the batcher bounds each claim by ClaimTimeout
		g.batcher = r.NewBatcher(cfg.PipelineWorkers, cfg.PipelineMaxBatch, cfg.ClaimTimeout)
		g.admit = g.batcher.Admit
	}
	g.auth = &auth{adminToken: []byte(cfg.AdminToken), eventsToken: []byte(cfg.EventsReadToken), users: token.New(token.Config{Secret: cfg.JWTSecret,
		PreviousSecret: cfg.JWTPreviousSecret, Issuer: cfg.JWTIssuer, Audience: cfg.JWTAudience,
		MaxLifetime: cfg.JWTMaxLifetime, Keys: cfg.valid.jwks, Now: func() time.Time { return g.now() }})}
	g.pow = proof.New(cfg.powKey(), cfg.PowTTL, func() time.Time { return g.now() })
	g.access = access.New(cfg.accessKey())
	g.queueTokens = room.NewTokens(cfg.powKey())
	var roomStore *room.Store
	if r != nil {
		roomStore = room.NewStore(r, cfg.RoomMaxWaiters)
	}
	g.rooms = room.NewCache(roomStore, func() time.Time { return g.now() })
	g.stopRooms = func() {}
	if r != nil {
		stop := every(roomTick, func() {
			ctx, cancel := context.WithTimeout(context.Background(), roomTick)
			defer cancel()
			g.tickRooms(ctx)
		})
		g.readRoomIndex()
		stopIndex := every(roomIndexEvery, g.readRoomIndex)
		g.stopRooms = func() { stop(); stopIndex(); g.rooms.Wait() }
	}
	g.stopSweep = g.sweepLimiters()
	g.history = history.New(history.Source{
		Claims:  g.claimTotals,
		Latency: func() []uint64 { return history.Buckets(g.metrics.claimSeconds, latencyBuckets) },
		Bounds:  latencyBuckets,
		Redis:   r,
		DB:      d,
		Log:     g.log,
	})
	g.stopHistory = every(historyEvery, func() { g.history.Sample(time.Now()) })
	return g, nil
}

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
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, &apiError{http.StatusNotFound, "not_found", "no such endpoint"})
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

// routes are the gateway's endpoints. Every one but the claim waits on
// MySQL: bounded in time and number.
func (g *Gateway) routes() []route {
	return []route{
		{http.MethodPost, "/v1/vouchers/{id}/orders", false, g.claim},
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
		{http.MethodGet, "/admin/v1/vouchers", true, g.mysqlBound(g.listVouchers)},
		{http.MethodPost, "/admin/v1/vouchers", true, g.mysqlBoundFor(max(createTimeout, g.cfg.MySQLTimeout), g.createVoucher)},
		{http.MethodGet, "/admin/v1/vouchers/{id}", true, g.mysqlBound(g.getVoucher)},
		{http.MethodGet, "/admin/v1/vouchers/{id}/report", true, g.mysqlBoundFor(max(reportTimeout, g.cfg.MySQLTimeout), g.voucherReport)},
		{http.MethodPatch, "/admin/v1/vouchers/{id}", true, g.mysqlBound(g.changeVoucher)},
		{http.MethodPost, "/admin/v1/vouchers/{id}/access-codes", true, g.mysqlBound(g.issueAccessCodes)},
		{http.MethodPost, "/admin/v1/vouchers/{id}/pause", true, g.mysqlBound(g.setPaused(true))},
		{http.MethodPost, "/admin/v1/vouchers/{id}/resume", true, g.mysqlBound(g.setPaused(false))},
		{http.MethodGet, "/admin/v1/stats", true, g.stats},
		{http.MethodGet, "/admin/v1/history", true, g.getHistory},
		{http.MethodGet, "/admin/v1/events", true, g.mysqlBound(g.listEvents)},
		{http.MethodGet, "/admin/v1/events/sinks", true, g.mysqlBound(g.listSinks)},
		{http.MethodGet, "/admin/console", true, serveConsole},
	}
}

// shed answers 411 length_required, closing the connection, to a body
// sent with Transfer-Encoding (an HTTP/1.0 request's too: framing.go);
// then 503 overloaded at once when
// MaxInflight requests are being served, then 429 rate_limited to an
// address over FLASHSALE_IP_RATE; all before any work (authentication,
// Redis) is done.
func (g *Gateway) shed(next http.Handler) http.Handler {
	limit := int64(g.cfg.MaxInflight)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TransferEncoding != nil {
			refuseFraming(w, errLengthRequired)
			return
		}
		if r.ProtoMajor == 1 && r.ProtoMinor == 0 { // its Transfer-Encoding was dropped: framing.go
			if e := http10Framing(r); e != nil {
				refuseFraming(w, e)
				return
			}
			w.Header().Set("Connection", "close")
		}
		if g.inflight.Add(1) > limit {
			g.inflight.Add(-1)
			g.metrics.shed.WithLabelValues("overloaded").Inc()
			writeError(w, errOverloaded)
			return
		}
		defer g.inflight.Add(-1)
		if ok, wait := g.addrs.Allow(ratelimit.ClientAddr(r, g.trusted), g.now()); !ok {
			g.metrics.shed.WithLabelValues("ip_rate").Inc()
			writeRateLimited(w, wait)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// errLengthRequired answers a request whose body came with a
// Transfer-Encoding. Go's server reads such a body as chunked and drops a
// Content-Length sent beside it, but a proxy in front may have framed the
// same bytes by that Content-Length: the bytes after the body would be a
// request smuggled past it (RFC 9112 §6.3 and §11.2). The server cannot
// tell the two apart once the header is dropped, and every body this API
// takes is a few bytes a client sends with its length, so every chunked
// body is refused and its connection closed: the bytes after it are
// never read as a request.
var errLengthRequired = &apiError{http.StatusLengthRequired, "length_required",
	"send the body with a Content-Length, not Transfer-Encoding"}

// refuseFraming answers e to a request whose framing is refused, and
// closes its connection: the bytes after it are never read as a request.
func refuseFraming(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Connection", "close")
	writeError(w, e)
}

// sweepEvery is how often the limiters forget their full buckets: a
// user's bucket is full again a second or two after a claim
// (FLASHSALE_USER_RATE and _BURST's defaults), so a sale's burst of
// distinct users is held about as long (a sweep of 20,000 buckets takes
// about a millisecond).
const sweepEvery = time.Second

// sweepLimiters forgets full buckets every sweepEvery until the returned
// stop is called. It always runs: the failed admin authentications are
// recorded per address whatever the other limits are.
func (g *Gateway) sweepLimiters() (stop func()) {
	return every(sweepEvery, func() {
		now := g.now()
		g.users.Sweep(now)
		g.addrs.Sweep(now)
		g.pages.Sweep(now)
		g.adminFails.Sweep(now)
		g.soldOut.Sweep()
		g.metrics.limiterKeys.WithLabelValues("user").Set(float64(g.users.Keys()))
		g.metrics.limiterKeys.WithLabelValues("ip").Set(float64(g.addrs.Keys()))
	})
}

// every runs f every d in a goroutine of its own until the returned stop
// is called; stop waits for a run in progress and may be called again.
func every(d time.Duration, f func()) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f()
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-finished }) }
}

// mysqlBound runs h, a handler that waits on MySQL, with a deadline of
// MySQLTimeout and at most MySQLMaxInflight such requests at once. One
// more is answered 503 at once: a hung or slow database must not pile up
// goroutines and connections until the gateway falls over, nor hold
// clients for minutes.
func (g *Gateway) mysqlBound(h http.HandlerFunc) http.HandlerFunc {
	return g.mysqlBoundFor(g.cfg.MySQLTimeout, h)
}

// createTimeout bounds creating a voucher: a pool of 100,000 codes is
// 100,000 rows written in one transaction, which a loaded MySQL may take
// seconds over. The gateway's listeners allow a response this late.
const createTimeout = 30 * time.Second

// mysqlBoundFor is mysqlBound with a deadline of its own.
func (g *Gateway) mysqlBoundFor(timeout time.Duration, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { g.withMySQL(w, r, timeout, h) }
}

// withMySQL runs h holding one of the MySQL slots, with a deadline of
// timeout; with none free it answers 503 at once. Only requests that wait
// on nothing but MySQL hold a slot: no slot is held while a body arrives
// from a client that has not proved who it is (see body.go).
func (g *Gateway) withMySQL(w http.ResponseWriter, r *http.Request, timeout time.Duration, h http.HandlerFunc) {
	select {
	case g.mysqlSlots <- struct{}{}:
		defer func() { <-g.mysqlSlots }()
	default:
		g.metrics.mysqlShed.Inc()
		writeError(w, errUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	h(w, r.WithContext(ctx))
}

// Close stops the admission batcher, the limiters' sweeper and the
// console's sampler. Serve calls it when it returns.
func (g *Gateway) Close() {
	if g.batcher != nil {
		g.batcher.Close()
	}
	g.stopSweep()
	g.stopHistory()
	g.stopRooms()
}

// Run serves on cfg.HTTPAddr (and the admin API on cfg.AdminAddr, when
// set) until ctx ends, then stops accepting, lets in-flight requests
// finish (up to ShutdownTimeout) and returns.
func (g *Gateway) Run(ctx context.Context) error {
	l, err := net.Listen("tcp", g.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("FLASHSALE_HTTP_ADDR %s: %w (set FLASHSALE_HTTP_ADDR to a free port, say :8081)", g.cfg.HTTPAddr, err)
	}
	served := []listener{{l, g.Handler(), "public"}}
	if g.cfg.AdminAddr != "" {
		al, err := net.Listen("tcp", g.cfg.AdminAddr)
		if err != nil {
			l.Close()
			return fmt.Errorf("FLASHSALE_ADMIN_ADDR: %w", err)
		}
		served = append(served, listener{al, g.AdminHandler(), "admin"})
	}
	return g.serve(ctx, served...)
}

// Serve is Run with the public handler on a listener of the caller's.
func (g *Gateway) Serve(ctx context.Context, l net.Listener) error {
	return g.serve(ctx, listener{l, g.Handler(), "public"})
}

type listener struct {
	l    net.Listener
	h    http.Handler
	name string
}

func (g *Gateway) serve(ctx context.Context, ls ...listener) error {
	defer g.Close()
	err := g.redis.EnsureGroups(ctx)
	if err == nil {
		err = g.redis.CheckDurability(ctx)
	}
	if err != nil {
		for _, l := range ls {
			l.l.Close()
		}
		return err
	}
	defer ops.StartCounts(ctx, g.log, cmp.Or(g.countsEvery, ops.CountsEvery), "claims", g.claimTotals)()
	errc := make(chan error, len(ls))
	servers := make([]*http.Server, len(ls))
	for i, l := range ls {
		servers[i] = &http.Server{
			Handler: l.h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
			WriteTimeout: createTimeout + 10*time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: ops.MaxHeaderBytes,
			ErrorLog: zap.NewStdLog(g.log.Named("http")), ConnContext: framedContext,
			// "OPTIONS *" reaches the handlers and their framing checks: Go's
			// own answer to it (200, the connection kept) skipped them, and
			// an HTTP/1.0 OPTIONS carried a chunked request past the guard.
			DisableGeneralOptionsHandler: true,
		}
		go func() { errc <- servers[i].Serve(framedListener{l.l}) }()
		g.log.Info("gateway listening", zap.String("api", l.name), zap.String("addr", l.l.Addr().String()), zap.Int("partitions", g.redis.Partitions()))
	}
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	g.log.Info("gateway shutting down")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.ShutdownTimeout)
	defer cancel()
	for _, srv := range servers {
		if serr := srv.Shutdown(sctx); serr != nil && err == nil {
			err = fmt.Errorf("shutdown: %w", serr)
		}
	}
	return err
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
	writeError(w, &apiError{http.StatusMethodNotAllowed, "method_not_allowed", r.Method + " is not allowed here"})
}

func (g *Gateway) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				g.log.Error("panic in handler", zap.Any("panic", v), zap.String("path", r.URL.Path), zap.Stack("stack"))
				writeError(w, errInternal)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// jsonContentType and noStore are header values set by assignment on the
// hot paths (claims, polls): shared, never changed, so no allocation.
var jsonContentType, noStore = []string{"application/json"}, []string{"no-store"}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal","message":"internal error"}`)
	}
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, e *apiError) {
	if e.Status == http.StatusServiceUnavailable || (e.Status == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "") {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, e.Status, e)
}

// fail answers err, logging what is not the client's doing.
func (g *Gateway) fail(w http.ResponseWriter, r *http.Request, err error) {
	e := toAPIError(err)
	if e.Status >= 500 {
		g.log.Warn("request failed", append(ops.TraceFields(r.Context()),
			zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Error(err))...)
	}
	writeError(w, e)
}

// userAndID authenticates a user request, holds it to the user's rate
// limit and parses its {id}; when it returns false it has answered the
// request.
func (g *Gateway) userAndID(w http.ResponseWriter, r *http.Request) (string, int64, bool) {
	user, ok := g.user(w, r)
	if !ok {
		return "", 0, false
	}
	id, err := pathID(r)
	if err != nil {
		g.fail(w, r, err)
		return "", 0, false
	}
	return user, id, true
}

// user authenticates a user request and holds it to the user's rate; it
// answers the request itself when either fails.
func (g *Gateway) user(w http.ResponseWriter, r *http.Request) (string, bool) {
	user, err := g.auth.user(r)
	if err != nil {
		g.fail(w, r, err)
		return "", false
	}
	if ok, wait := g.users.Allow(user, g.now()); !ok {
		g.metrics.shed.WithLabelValues("user_rate").Inc()
		writeRateLimited(w, wait)
		return "", false
	}
	return user, true
}

// Failed admin authentications are throttled per client address: after a
// burst of adminFailBurst wrong tokens, a wrong token is answered 429 (not
// 401) until one try every adminFailEvery is earned back. The throttle acts
// only after a wrong token: a right token is always let through, so an
// operator sharing an address with an attacker (a NAT, kubectl
// port-forward, a proxy not listed in FLASHSALE_TRUSTED_PROXIES) is never
// locked out. The trade-off: a guesser who ignores the 429s still has
// every guess checked, so the defence against guessing is the token's
// length (at least 32 bytes, 256 bits from openssl rand -hex 32); the
// throttle keeps the log and the metric of a guessing run small and
// visible (flashsale_requests_shed_total{reason="admin_auth"}).
const (
	adminFailBurst = 10
	adminFailEvery = 6 * time.Second
)

// admin authenticates an admin request and answers it if it fails:
// 401, or 429 with Retry-After to an address that failed too often.
func (g *Gateway) admin(w http.ResponseWriter, r *http.Request) bool {
	return g.authorized(w, r, g.auth.admin(r))
}

// eventsReader is admin for the routes that read the order events: the
// admin token or FLASHSALE_EVENTS_READ_TOKEN.
func (g *Gateway) eventsReader(w http.ResponseWriter, r *http.Request) bool {
	return g.authorized(w, r, g.auth.eventsReader(r))
}

// authorized answers a request to /admin whose token checked as err: on
// with nil, a 403 for a known token on a route it does not open, and a
// failure counted against the caller's address for any other.
func (g *Gateway) authorized(w http.ResponseWriter, r *http.Request, err error) bool {
	if err == nil {
		return true
	}
	if err == errEventsOnly {
		g.fail(w, r, err)
		return false
	}
	addr := ratelimit.ClientAddr(r, g.trusted)
	if wait := g.adminFails.Blocked(addr, g.now()); wait > 0 {
		g.metrics.shed.WithLabelValues("admin_auth").Inc()
		writeRateLimited(w, wait)
		return false
	}
	g.adminFails.Allow(addr, g.now())
	g.log.Warn("admin authentication failed", zap.String("addr", addr), zap.String("path", r.URL.Path))
	g.fail(w, r, err)
	return false
}

// adminAndID is userAndID for the admin API.
func (g *Gateway) adminAndID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	if !g.admin(w, r) {
		return 0, false
	}
	id, err := pathID(r)
	if err != nil {
		g.fail(w, r, err)
		return 0, false
	}
	return id, true
}

// pathID parses the {id} path segment: a positive decimal id.
func pathID(r *http.Request) (int64, error) { return parseID(r.PathValue("id")) }

// parseID reads an id of the path.
func parseID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 || len(s) > 20 || s[0] == '+' {
		return 0, badRequest("invalid_id", "the id in the path must be a positive decimal integer")
	}
	return id, nil
}

func idString(id int64) string { return strconv.FormatInt(id, 10) }
