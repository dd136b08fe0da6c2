// Package gateway is flashsale's HTTP front: it admits claims with one Redis
// script per request (never touching MySQL on that path), and serves the
// order and admin APIs.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
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
	if len(cfg.JWTSecret) < 32 {
		return nil, errors.New("FLASHSALE_JWT_SECRET must be at least 32 bytes")
	}
	if cfg.AdminToken == "" {
		return nil, errors.New("FLASHSALE_ADMIN_TOKEN is empty")
	}
	loc, err := time.LoadLocation(cfg.TimeZone)
	if err != nil {
		return nil, fmt.Errorf("FLASHSALE_TIMEZONE: %w", err)
	}
	if cfg.ClaimTimeout <= 0 {
		cfg.ClaimTimeout = 300 * time.Millisecond
	}
	if cfg.IdempotencyTTL <= 0 {
		cfg.IdempotencyTTL = 24 * time.Hour
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 15 * time.Second
	}
	if log == nil {
		log = zap.NewNop()
	}
	g := &Gateway{cfg: cfg, loc: loc, now: time.Now, redis: r, db: d, log: log.Named("gateway"), reg: prometheus.NewRegistry()}
	for _, o := range opts {
		o(g)
	}
	g.metrics = newMetrics(g.reg)
	g.admit = r.Admit
	if cfg.PipelineWorkers > 0 {
		if cfg.PipelineMaxBatch <= 0 {
			cfg.PipelineMaxBatch = 128
		}
		g.batcher = r.NewBatcher(cfg.PipelineWorkers, cfg.PipelineMaxBatch, cfg.ClaimTimeout)
		g.admit = g.batcher.Admit
	}
	g.auth = newAuth(cfg.JWTSecret, cfg.AdminToken, func() time.Time { return g.now() })
	return g, nil
}

// Handler is the gateway's HTTP handler.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/vouchers/{id}/orders", methods{http.MethodPost: g.claim})
	mux.Handle("/v1/orders/{id}", methods{http.MethodGet: g.getOrder})
	mux.Handle("/v1/orders/{id}/pay", methods{http.MethodPost: g.payOrder})
	mux.Handle("/admin/v1/vouchers", methods{http.MethodPost: g.createVoucher})
	mux.Handle("/admin/v1/vouchers/{id}", methods{http.MethodGet: g.getVoucher})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, &apiError{http.StatusNotFound, "not_found", "no such endpoint"})
	})
	return g.recoverer(mux)
}

// Close stops the admission batcher. Serve calls it when it returns.
func (g *Gateway) Close() {
	if g.batcher != nil {
		g.batcher.Close()
	}
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
	if e.Status == http.StatusServiceUnavailable {
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

// userAndID authenticates a user request and parses its {id}; when it
// returns false it has answered the request.
func (g *Gateway) userAndID(w http.ResponseWriter, r *http.Request) (string, int64, bool) {
	user, err := g.auth.user(r)
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
