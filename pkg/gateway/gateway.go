// Package gateway is flashsale's HTTP front: it admits claims with one Redis
// script per request (never touching MySQL on that path), and serves the
// order and admin APIs.
package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
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
	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// Config of the gateway.
type Config struct {
	// HTTPAddr is the listen address. Default ":8080".
	HTTPAddr string `envconfig:"FLASHSALE_HTTP_ADDR" default:":8080"`
	// AdminToken guards /admin (required).
	AdminToken string `envconfig:"FLASHSALE_ADMIN_TOKEN" required:"true"`
	// JWTSecret verifies the users' HS256 tokens; at least 32 bytes (required).
	JWTSecret string `envconfig:"FLASHSALE_JWT_SECRET" required:"true"`
	// TimeZone is where a "day" of the per-day limit starts. Default "UTC".
	TimeZone string `envconfig:"FLASHSALE_TIMEZONE" default:"UTC"`
	// ClaimTimeout bounds the Redis work of one claim; past it the claim
	// answers 503. Default 300ms.
	ClaimTimeout time.Duration `envconfig:"FLASHSALE_CLAIM_TIMEOUT" default:"300ms"`
	// IdempotencyTTL is how long an Idempotency-Key is remembered. Default 24h.
	IdempotencyTTL time.Duration `envconfig:"FLASHSALE_IDEMPOTENCY_TTL" default:"24h"`
	// ShutdownTimeout bounds finishing in-flight requests. Default 15s.
	ShutdownTimeout time.Duration `envconfig:"FLASHSALE_SHUTDOWN_TIMEOUT" default:"15s"`
	// PipelineWorkers is the number of pipelines in flight to Redis at
	// once: concurrent claims are coalesced into them (auto-pipelining).
	// 0 sends one EVALSHA per claim. Default 4.
	PipelineWorkers int `envconfig:"FLASHSALE_REDIS_PIPELINE_WORKERS" default:"4"`
	// PipelineMaxBatch bounds the claims in one pipeline. Default 128.
	PipelineMaxBatch int `envconfig:"FLASHSALE_REDIS_PIPELINE_MAX_BATCH" default:"128"`
	// MySQLTimeout bounds the MySQL work of one request that reads or
	// writes MySQL (orders, payments, admin); past it the request answers
	// 503. Default 2s.
	MySQLTimeout time.Duration `envconfig:"FLASHSALE_MYSQL_REQUEST_TIMEOUT" default:"2s"`
	// MySQLMaxInflight bounds the requests waiting on MySQL at once; one
	// more answers 503 at once instead of queueing. Default 64.
	MySQLMaxInflight int `envconfig:"FLASHSALE_MYSQL_MAX_INFLIGHT" default:"64"`
	// UserRate limits each user (the token's sub) on the user API, in
	// requests per second, before the admission script runs; 0 = off.
	// Default 10.
	UserRate float64 `envconfig:"FLASHSALE_USER_RATE" default:"10"`
	// UserBurst is the requests a user may make at once. Default 20.
	UserBurst int `envconfig:"FLASHSALE_USER_BURST" default:"20"`
	// IPRate limits each client address, requests per second; 0 = off
	// (the default).
	IPRate float64 `envconfig:"FLASHSALE_IP_RATE" default:"0"`
	// IPBurst is the requests an address may make at once. Default: twice
	// IPRate, at least 1.
	IPBurst int `envconfig:"FLASHSALE_IP_BURST" default:"0"`
	// TrustedProxies are the CIDRs (or addresses) of the proxies whose
	// X-Forwarded-For is believed; from anyone else it is ignored.
	TrustedProxies []string `envconfig:"FLASHSALE_TRUSTED_PROXIES"`
	// MaxInflight bounds the requests in flight in this gateway; one more
	// is answered 503 overloaded at once, never queued. Default 4096.
	MaxInflight int `envconfig:"FLASHSALE_MAX_INFLIGHT" default:"4096"`
}

// Defaults of Config: one constant per field, used when the field is zero.
const (
	HTTPAddrDefault         = ":8080"
	TimeZoneDefault         = "UTC"
	ClaimTimeoutDefault     = 300 * time.Millisecond
	IdempotencyTTLDefault   = 24 * time.Hour
	ShutdownTimeoutDefault  = 15 * time.Second
	PipelineMaxBatchDefault = 128
	MySQLTimeoutDefault     = 2 * time.Second
	MySQLMaxInflightDefault = 64
	UserBurstDefault        = 20
	MaxInflightDefault      = 4096
	minJWTSecret            = 32
)

// SetDefaults fills the zero fields with the defaults. PipelineWorkers
// stays as set: 0 is a choice (no pipelining).
func (c *Config) SetDefaults() {
	c.HTTPAddr = cmp.Or(c.HTTPAddr, HTTPAddrDefault)
	c.TimeZone = cmp.Or(c.TimeZone, TimeZoneDefault)
	c.ClaimTimeout = cmp.Or(c.ClaimTimeout, ClaimTimeoutDefault)
	c.IdempotencyTTL = cmp.Or(c.IdempotencyTTL, IdempotencyTTLDefault)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, ShutdownTimeoutDefault)
	c.PipelineMaxBatch = cmp.Or(c.PipelineMaxBatch, PipelineMaxBatchDefault)
	c.MySQLTimeout = cmp.Or(c.MySQLTimeout, MySQLTimeoutDefault)
	c.MySQLMaxInflight = cmp.Or(c.MySQLMaxInflight, MySQLMaxInflightDefault)
	c.UserBurst = cmp.Or(c.UserBurst, UserBurstDefault)
	c.IPBurst = cmp.Or(c.IPBurst, max(1, int(math.Ceil(2*c.IPRate))))
	c.MaxInflight = cmp.Or(c.MaxInflight, MaxInflightDefault)
}

// Validate reports the first wrong value, naming its variable. Call it
// after SetDefaults.
func (c *Config) Validate() error {
	switch {
	case c.AdminToken == "":
		return errors.New("FLASHSALE_ADMIN_TOKEN is required")
	case len(c.JWTSecret) < minJWTSecret:
		return fmt.Errorf("FLASHSALE_JWT_SECRET must be at least %d bytes", minJWTSecret)
	case c.ClaimTimeout < 0:
		return fmt.Errorf("FLASHSALE_CLAIM_TIMEOUT must be positive, got %s", c.ClaimTimeout)
	case c.IdempotencyTTL < time.Second:
		return fmt.Errorf("FLASHSALE_IDEMPOTENCY_TTL must be at least 1s, got %s", c.IdempotencyTTL)
	case c.ShutdownTimeout < 0:
		return fmt.Errorf("FLASHSALE_SHUTDOWN_TIMEOUT must be positive, got %s", c.ShutdownTimeout)
	case c.PipelineWorkers < 0 || c.PipelineWorkers > 1024:
		return fmt.Errorf("FLASHSALE_REDIS_PIPELINE_WORKERS must be 0..1024, got %d", c.PipelineWorkers)
	case c.PipelineMaxBatch < 1 || c.PipelineMaxBatch > 10_000:
		return fmt.Errorf("FLASHSALE_REDIS_PIPELINE_MAX_BATCH must be 1..10000, got %d", c.PipelineMaxBatch)
	case c.MySQLTimeout < 0:
		return fmt.Errorf("FLASHSALE_MYSQL_REQUEST_TIMEOUT must be positive, got %s", c.MySQLTimeout)
	case c.MySQLMaxInflight < 1:
		return fmt.Errorf("FLASHSALE_MYSQL_MAX_INFLIGHT must be at least 1, got %d", c.MySQLMaxInflight)
	case c.UserRate < 0 || math.IsNaN(c.UserRate) || math.IsInf(c.UserRate, 0):
		return fmt.Errorf("FLASHSALE_USER_RATE must be 0 (off) or a positive rate, got %v", c.UserRate)
	case c.UserBurst < 1:
		return fmt.Errorf("FLASHSALE_USER_BURST must be at least 1, got %d", c.UserBurst)
	case c.IPRate < 0 || math.IsNaN(c.IPRate) || math.IsInf(c.IPRate, 0):
		return fmt.Errorf("FLASHSALE_IP_RATE must be 0 (off) or a positive rate, got %v", c.IPRate)
	case c.IPBurst < 1:
		return fmt.Errorf("FLASHSALE_IP_BURST must be at least 1, got %d", c.IPBurst)
	case c.MaxInflight < 1:
		return fmt.Errorf("FLASHSALE_MAX_INFLIGHT must be at least 1, got %d", c.MaxInflight)
	}
	if _, err := parsePrefixes(c.TrustedProxies); err != nil {
		return fmt.Errorf("FLASHSALE_TRUSTED_PROXIES: %w", err)
	}
	if _, err := time.LoadLocation(c.TimeZone); err != nil {
		return fmt.Errorf("FLASHSALE_TIMEZONE: %w", err)
	}
	return nil
}

// Gateway serves the HTTP API.
type Gateway struct {
	cfg     Config
	loc     *time.Location
	now     func() time.Time
	redis   *rdb.Store
	db      *db.Store
	auth    *auth
	log     *zap.Logger
	metrics *metrics
	reg     prometheus.Registerer
	// admit is the Redis admission: through the batcher, or direct.
	admit   func(context.Context, rdb.Claim) (rdb.Admission, error)
	batcher *rdb.Batcher
	// mysqlSlots bounds the requests waiting on MySQL (MySQLMaxInflight).
	mysqlSlots chan struct{}
	// users and addrs are the rate limits (nil: off); inflight counts the
	// requests being served (MaxInflight).
	users, addrs *keyedLimiter
	trusted      []netip.Prefix
	inflight     atomic.Int64
	stopSweep    func()
}

// Option changes a Gateway.
type Option func(*Gateway)

// WithClock replaces time.Now, for tests.
func WithClock(now func() time.Time) Option { return func(g *Gateway) { g.now = now } }

// WithRegistry registers the gateway's metrics with reg (default: a
// registry of its own, unexposed).
func WithRegistry(reg prometheus.Registerer) Option { return func(g *Gateway) { g.reg = reg } }

// New returns a Gateway. The clock is time.Now unless WithClock says otherwise.
func New(cfg Config, r *rdb.Store, d *db.Store, log *zap.Logger, opts ...Option) (*Gateway, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	loc, err := time.LoadLocation(cfg.TimeZone)
	if err != nil {
		return nil, err
	}
	trusted, err := parsePrefixes(cfg.TrustedProxies)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	g := &Gateway{cfg: cfg, loc: loc, now: time.Now, redis: r, db: d, log: log.Named("gateway"), reg: prometheus.NewRegistry(),
		mysqlSlots: make(chan struct{}, cfg.MySQLMaxInflight), trusted: trusted,
		users: newKeyedLimiter(cfg.UserRate, cfg.UserBurst), addrs: newKeyedLimiter(cfg.IPRate, cfg.IPBurst)}
	for _, o := range opts {
		o(g)
	}
	g.metrics = newMetrics(g.reg)
	g.admit = r.Admit
	if cfg.PipelineWorkers > 0 {
		g.batcher = r.NewBatcher(cfg.PipelineWorkers, cfg.PipelineMaxBatch, cfg.ClaimTimeout)
		g.admit = g.batcher.Admit
	}
	g.auth = newAuth(cfg.JWTSecret, cfg.AdminToken, func() time.Time { return g.now() })
	g.stopSweep = g.sweepLimiters()
	return g, nil
}

// Handler is the gateway's HTTP handler.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/vouchers/{id}/orders", methods{http.MethodPost: g.claim})
	// Every route but the claim waits on MySQL: bounded in time and number.
	mux.Handle("/v1/orders/{id}", methods{http.MethodGet: g.mysqlBound(g.getOrder)})
	mux.Handle("/v1/orders/{id}/pay", methods{http.MethodPost: g.mysqlBound(g.payOrder)})
	mux.Handle("/admin/v1/vouchers", methods{http.MethodPost: g.mysqlBound(g.createVoucher)})
	mux.Handle("/admin/v1/vouchers/{id}", methods{http.MethodGet: g.mysqlBound(g.getVoucher)})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, &apiError{http.StatusNotFound, "not_found", "no such endpoint"})
	})
	return g.recoverer(g.shed(mux))
}

// shed answers 503 overloaded at once when MaxInflight requests are being
// served, then 429 rate_limited to an address over FLASHSALE_IP_RATE; both
// before any work (authentication, Redis) is done.
func (g *Gateway) shed(next http.Handler) http.Handler {
	limit := int64(g.cfg.MaxInflight)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.inflight.Add(1) > limit {
			g.inflight.Add(-1)
			g.metrics.shed.WithLabelValues("overloaded").Inc()
			writeError(w, errOverloaded)
			return
		}
		defer g.inflight.Add(-1)
		if ok, wait := g.addrs.allow(clientAddr(r, g.trusted), g.now()); !ok {
			g.metrics.shed.WithLabelValues("ip_rate").Inc()
			writeRateLimited(w, wait)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// sweepLimiters forgets full buckets every few seconds until the returned
// stop is called.
func (g *Gateway) sweepLimiters() (stop func()) {
	if g.users == nil && g.addrs == nil {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				now := g.now()
				g.users.sweep(now)
				g.addrs.sweep(now)
				g.metrics.limiterKeys.WithLabelValues("user").Set(float64(g.users.keys()))
				g.metrics.limiterKeys.WithLabelValues("ip").Set(float64(g.addrs.keys()))
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
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case g.mysqlSlots <- struct{}{}:
			defer func() { <-g.mysqlSlots }()
		default:
			g.metrics.mysqlShed.Inc()
			writeError(w, errUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), g.cfg.MySQLTimeout)
		defer cancel()
		h(w, r.WithContext(ctx))
	}
}

// Close stops the admission batcher and the limiters' sweeper. Serve calls
// it when it returns.
func (g *Gateway) Close() {
	if g.batcher != nil {
		g.batcher.Close()
	}
	g.stopSweep()
}

// Run serves on cfg.HTTPAddr until ctx ends, then stops accepting, lets
// in-flight requests finish (up to ShutdownTimeout) and returns.
func (g *Gateway) Run(ctx context.Context) error {
	l, err := net.Listen("tcp", g.cfg.HTTPAddr)
	if err != nil {
		return err
	}
	return g.Serve(ctx, l)
}

// Serve is Run on a listener of the caller's.
func (g *Gateway) Serve(ctx context.Context, l net.Listener) error {
	defer g.Close()
	if err := g.redis.EnsureGroups(ctx); err != nil {
		return err
	}
	srv := &http.Server{
		Handler: g.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second,
		ErrorLog: zap.NewStdLog(g.log.Named("http")),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	g.log.Info("gateway listening", zap.String("addr", l.Addr().String()), zap.Int("partitions", g.redis.Partitions()))
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	g.log.Info("gateway shutting down")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
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

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal","message":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
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
		g.log.Warn("request failed", zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Error(err))
	}
	writeError(w, e)
}

// userAndID authenticates a user request, holds it to the user's rate
// limit and parses its {id}; when it returns false it has answered the
// request.
func (g *Gateway) userAndID(w http.ResponseWriter, r *http.Request) (string, int64, bool) {
	user, err := g.auth.user(r)
	if err == nil {
		if ok, wait := g.users.allow(user, g.now()); !ok {
			g.metrics.shed.WithLabelValues("user_rate").Inc()
			writeRateLimited(w, wait)
			return "", 0, false
		}
	}
	var id int64
	if err == nil {
		id, err = pathID(r)
	}
	if err != nil {
		g.fail(w, r, err)
		return "", 0, false
	}
	return user, id, true
}

// adminAndID is userAndID for the admin API.
func (g *Gateway) adminAndID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	err := g.auth.admin(r)
	var id int64
	if err == nil {
		id, err = pathID(r)
	}
	if err != nil {
		g.fail(w, r, err)
		return 0, false
	}
	return id, true
}

// pathID parses the {id} path segment: a positive decimal id.
func pathID(r *http.Request) (int64, error) {
	s := r.PathValue("id")
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 || len(s) > 20 || s[0] == '+' {
		return 0, badRequest("invalid_id", "the id in the path must be a positive decimal integer")
	}
	return id, nil
}

func idString(id int64) string { return strconv.FormatInt(id, 10) }
