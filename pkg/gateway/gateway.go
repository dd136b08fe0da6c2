// Package gateway is flashsale's HTTP front: it admits claims with one Redis
// script per request (never touching MySQL on that path), and serves the
// order and admin APIs.
package gateway

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/access"
	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/gateway/claimid"
	"github.com/flashsale/flashsale/pkg/gateway/operator"
	"github.com/flashsale/flashsale/pkg/history"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/proof"
	"github.com/flashsale/flashsale/pkg/ratelimit"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
	"github.com/flashsale/flashsale/pkg/room"
	"github.com/flashsale/flashsale/pkg/soldout"
	"github.com/flashsale/flashsale/pkg/token"
)

// Gateway serves the HTTP API.
type Gateway struct {
	cfg   Config
	loc   *time.Location
	days  *order.Days // the per-day limit's day in loc, formatted once a day
	now   func() time.Time
	redis *rdb.Store
	// admitter decides the claims in Redis (pkg/rdb/admission), sending
	// them on admitClient (WithAdmitClient); nil without Redis.
	admitter    *admission.Admitter
	admitClient redis.UniversalClient
	db          *db.Store
	// adminDB is the operator's MySQL pool (dbOf); nil without MySQL.
	adminDB *db.Store
	// eventsDB is the events readers' pool (the admin API's events
	// routes), apart from the operator's.
	eventsDB *db.Store
	auth     *auth
	pow      *proof.Issuer // proof-of-work challenges and their verification
	// access makes and checks access codes (pkg/access).
	access      *access.Codes
	countsEvery time.Duration // how often the claims' counts are logged
	// rooms are the waiting rooms served, each one's last state
	// (pkg/room's Cache, refreshed by roomTick); queueTokens signs their
	// waiters' tokens.
	rooms       *room.Cache
	queueTokens *room.Tokens
	stopRooms   func()
	log         *zap.Logger
	metrics     *metrics
	reg         prometheus.Registerer
	// batcher pipelines the claims' admissions (nil: each alone; admitNow).
	batcher *admission.Batcher
	// soldOut answers claims of vouchers Redis said are sold out (pkg/soldout).
	soldOut *soldout.Cache
	// refused counts refused claims per voucher for sales' reports;
	// replica names this replica in them (report.go).
	refused operator.Refusals
	unknown operator.Refusals // claims answered outcome_unknown, by voucher and resolution (outcome.go)
	replica string
	// ops is the admin API (pkg/gateway/operator).
	ops *operator.API
	// drawFigures are the draws' figures, a scan each, shared a while.
	drawFigures *db.DrawFiguresCache
	// pageFaces are the names (and openings) the queue page shows (queuepage.go).
	pageFaces pageFaces
	// history is what the console charts (pkg/history).
	history     *history.Sampler
	stopHistory func()
	// mysqlSlots bounds the buyers' requests waiting on MySQL
	// (MySQLMaxInflight), adminSlots the operator's (shed.go).
	mysqlSlots, adminSlots, eventsSlots chan struct{}
	// users, addrs and pages are the rate limits (nil: off); inflight
	// counts the requests being served (MaxInflight).
	users, addrs, pages *ratelimit.Keyed
	// adminFails holds the failed admin authentications per address.
	adminFails *ratelimit.Keyed
	trusted    []netip.Prefix
	inflight   atomic.Int64
	// adminInflight counts the admin API's requests (shed.go).
	adminInflight atomic.Int64
	stopSweep     func()
	roomTick      time.Duration // roomTick, unless a test says otherwise
	// claimIDs makes and reads claim ids (outcome.go); lateWG waits for
	// the late outcomes being recorded.
	claimIDs *claimid.Signer
	lateWG   sync.WaitGroup
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

// WithAdmitClient sends the admissions on c, a client of the same Redis
// whose read timeout is as long as a claim's outcome is listened for
// (admission.New).
func WithAdmitClient(c redis.UniversalClient) Option { return func(g *Gateway) { g.admitClient = c } }

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
	g := &Gateway{cfg: cfg, loc: loc, days: order.NewDays(loc), now: time.Now, roomTick: roomTick, redis: r, db: d, log: log.Named("gateway"), reg: prometheus.NewRegistry(),
		mysqlSlots: make(chan struct{}, cfg.MySQLMaxInflight), adminSlots: make(chan struct{}, adminMySQLSlots),
		eventsSlots: make(chan struct{}, eventsMySQLSlots), trusted: trusted,
		users: ratelimit.New(cfg.UserRate, cfg.UserBurst), addrs: ratelimit.New(cfg.IPRate, cfg.IPBurst),
		pages:      ratelimit.New(cfg.QueuePageRate, max(1, int(math.Ceil(2*cfg.QueuePageRate)))),
		adminFails: ratelimit.New(float64(time.Second)/float64(adminFailEvery), adminFailBurst),
		soldOut:    soldout.New(cfg.SoldOutRefresh, soldout.Monotonic()), replica: operator.ReplicaName()}
	g.refused.Since = time.Now()
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
		g.admitter = admission.New(r, g.admitClient)
	}
	if d != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		admin, err := d.Apart(ctx, adminMySQLSlots)
		if err != nil {
			return nil, fmt.Errorf("the operator's mysql pool: %w", err)
		}
		g.adminDB = admin
		if g.eventsDB, err = d.Apart(ctx, eventsMySQLSlots); err != nil {
			_ = admin.Close()
			return nil, fmt.Errorf("the events readers' mysql pool: %w", err)
		}
	}
	if cfg.PipelineWorkers > 0 { // the batcher bounds each claim by ClaimTimeout
		g.batcher = g.admitter.StartBatcher(admission.BatcherConfig{Workers: cfg.PipelineWorkers, MaxBatch: cfg.PipelineMaxBatch,
			Timeout: cfg.ClaimTimeout, ReplyTimeout: cfg.ClaimReplyTimeout, Late: g.recordLate})
	}
	g.claimIDs = claimid.New(cfg.keyOr("", "flashsale claim-id key"), cfg.ClaimOutcomeTimeout)
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
		stop := every(g.roomTick, func() {
			ctx, cancel := context.WithTimeout(context.Background(), roomTick)
			defer cancel()
			g.tickRooms(ctx)
		})
		g.readRoomIndex()
		stopIndex := every(roomIndexEvery, g.readRoomIndex)
		g.stopRooms = func() { // both at once: a pass of each may be waiting on Redis
			indexStopped := make(chan struct{})
			go func() { stopIndex(); close(indexStopped) }()
			stop()
			<-indexStopped
			g.rooms.Wait()
		}
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
	g.ops = g.operatorAPI()
	g.stopHistory = every(operator.HistoryEvery, func() { g.history.Sample(time.Now()) })
	return g, nil
}

// Close stops the admission batcher, the limiters' sweeper and the
// console's sampler, within ShutdownTimeout (closeBy). Serve calls it
// when it returns.
func (g *Gateway) Close() { g.closeBy(time.Now().Add(g.cfg.ShutdownTimeout)) }

// closeBy is Close ended by deadline: the admission round trips still in
// flight then are cut (admission.Batcher.CloseBy), and the late outcomes still
// being recorded are left (their round trips end at the store's read
// timeout): those claims stay decidable by the buyers' orders and their
// horizons (outcome.go).
func (g *Gateway) closeBy(deadline time.Time) {
	began := time.Now()
	// The background passes stop beside the admissions: each waits for
	// its pass in flight, which its store's timeout bounds.
	stopped := make(chan struct{})
	go func() { g.stopSweep(); g.stopHistory(); g.stopRooms(); close(stopped) }()
	if g.batcher != nil {
		g.batcher.CloseBy(deadline)
	}
	admissions := time.Since(began)
	recorded := make(chan struct{})
	go func() { g.lateWG.Wait(); close(recorded) }()
	expired := make(chan struct{})
	t := time.AfterFunc(time.Until(deadline), func() { close(expired) })
	defer t.Stop()
	select {
	case <-recorded:
	case <-expired:
		g.log.Warn("shutting down with claims' late outcomes not recorded: their buyers' orders and horizons decide them")
	}
	select {
	case <-stopped:
	case <-expired: // a pass still waiting on a store is left: the process is ending
	}
	g.log.Info("gateway closed", zap.Duration("admissions", admissions), zap.Duration("in_all", time.Since(began)))
	if g.adminDB != nil {
		_ = g.adminDB.Close()
	}
	if g.eventsDB != nil {
		_ = g.eventsDB.Close()
	}
}
