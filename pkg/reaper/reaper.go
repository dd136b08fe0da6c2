// Package reaper keeps the pipeline's promises when processes die, users
// do not pay and sales end. Its services (Reaper.services, each on its own
// interval; docs/ARCHITECTURE.md, "The reaper's services", describes each)
// take over stream entries left pending by workers that went away
// (XAUTOCLAIM) and dead-letter those delivered too often; remove consumers
// that are gone; cancel orders not paid in time and give their units back
// to MySQL and Redis exactly once; refund ended envelope sales and draw
// ended draw sales; finish a bucket's moves, restore a Redis that lost its
// vouchers, trim the streams and sweep old keys; compare the stores;
// sequence and relay the order events; and find hot vouchers and split
// them. Several reapers may run at once: every step is either atomic in
// Redis (XAUTOCLAIM, a script), skips rows another reaper holds (SKIP
// LOCKED), holds a lease (a sink's relay), or is idempotent (releases).
package reaper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/backoff"
	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/event"
	"github.com/flashsale/flashsale/pkg/persist"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/split"
	"github.com/flashsale/flashsale/pkg/rdb/upkeep"
)

// Config of the reaper. Zero values take the defaults.
type Config struct {
	// Config configures how entries taken over are processed: the same code
	// (persist.Orders) and settings as a worker (batch size, takeover
	// min-idle, consumer name).
	persist.Config
	// MaxDeliveries: an entry delivered more often goes to the dead-letter
	// stream, its order recorded as failed. Default 10.
	MaxDeliveries int64 `envconfig:"FLASHSALE_MAX_DELIVERIES" default:"10"`
	// Interval between rounds of each service (jittered by ±20%), unless
	// the service's own interval below is set. Default 5s.
	Interval time.Duration `envconfig:"FLASHSALE_REAPER_INTERVAL" default:"5s"`
	// RescueInterval: taking over stale entries (XAUTOCLAIM). Default Interval.
	RescueInterval time.Duration `envconfig:"FLASHSALE_REAPER_RESCUE_INTERVAL"`
	// ConsumersInterval: removing gone consumers. Default Interval.
	ConsumersInterval time.Duration `envconfig:"FLASHSALE_REAPER_CONSUMERS_INTERVAL"`
	// ExpireInterval: cancelling unpaid orders. Default Interval.
	ExpireInterval time.Duration `envconfig:"FLASHSALE_REAPER_EXPIRE_INTERVAL"`
	// ReleaseInterval paces the services that finish what MySQL and Redis
	// owe each other: the releaser (releases MySQL owes Redis), the mover
	// (a bucket's moves), the restorer (a Redis that lost its vouchers)
	// and the trimmer (the streams). Default Interval.
	ReleaseInterval time.Duration `envconfig:"FLASHSALE_REAPER_RELEASE_INTERVAL"`
	// RefundInterval: refunding what nobody grabbed of ended envelope
	// sales, and drawing ended draw sales. Default Interval.
	RefundInterval time.Duration `envconfig:"FLASHSALE_REAPER_REFUND_INTERVAL"`
	// CheckInterval: comparing Redis with MySQL (reconcile without
	// repair) for the flashsale_reconcile_* gauges. Default 5m.
	CheckInterval time.Duration `envconfig:"FLASHSALE_REAPER_CHECK_INTERVAL" default:"5m"`
	// RedisDurability, RedisMinReplicas and RedisWaitTimeout: the
	// gateway's settings (FLASHSALE_REDIS_DURABILITY and the two after it),
	// which the reaper's close of an envelope sale's pool waits for before
	// MySQL records the refund: a close a failover lost would sell again
	// what MySQL refunded. Defaults "none", 1 and 100ms.
	RedisDurability  string        `envconfig:"FLASHSALE_REDIS_DURABILITY" default:"none"`
	RedisMinReplicas int           `envconfig:"FLASHSALE_REDIS_MIN_REPLICAS" default:"1"`
	RedisWaitTimeout time.Duration `envconfig:"FLASHSALE_REDIS_WAIT_TIMEOUT" default:"100ms"`
	// RoundTimeout bounds one round. Default 1m.
	RoundTimeout time.Duration `envconfig:"FLASHSALE_REAPER_ROUND_TIMEOUT" default:"1m"`
	// MaxPerRound bounds the cancellations and releases of one round (and the
	// released orders the trimmer reads to forget), so a
	// round ends and starts over with fresh claims. Default 10000.
	MaxPerRound int `envconfig:"FLASHSALE_REAPER_MAX_PER_ROUND" default:"10000"`
	// ConsumerGoneAfter: a consumer idle this long with nothing pending is
	// removed from the group. Default 5m.
	ConsumerGoneAfter time.Duration `envconfig:"FLASHSALE_CONSUMER_GONE_AFTER" default:"5m"`
	// EventsInterval: giving committed order events their sequence.
	// Default 1s.
	EventsInterval time.Duration `envconfig:"FLASHSALE_REAPER_EVENTS_INTERVAL" default:"1s"`
	// HotSplitAt: the units a second one Redis bucket of a voucher may
	// admit: a voucher with a bucket at or above it for HotSplitFor is
	// marked hot (the detector). Default 100000, two thirds of what one
	// master admits of one voucher in make bench (docs/BENCHMARKS.md).
	HotSplitAt int64 `envconfig:"FLASHSALE_HOT_SPLIT_AT" default:"100000"`
	// HotSplitFor: how long a voucher must stay above HotSplitAt to be
	// marked hot, and below it to be marked cool again. Default 5s.
	HotSplitFor time.Duration `envconfig:"FLASHSALE_HOT_SPLIT_FOR" default:"5s"`
	// HotSplit: what a voucher marked hot gets: auto (default) asks for
	// its buckets to be split over every master of the Redis Cluster
	// (split.Splitter.Target; on one Redis nothing: one thread decides
	// every bucket there), the splitter does it; off only marks it.
	HotSplit string `envconfig:"FLASHSALE_HOT_SPLIT" default:"auto"`
	// DetectInterval: reading the vouchers' buckets' levels. Default 1s.
	DetectInterval time.Duration `envconfig:"FLASHSALE_REAPER_DETECT_INTERVAL" default:"1s"`
	// SweepInterval: the sweeper's pass over the vouchers on sale, dropping
	// from their users' indexes of admissions the orders persisted since
	// (upkeep.Indexes.Sweep). Default 1m.
	SweepInterval time.Duration `envconfig:"FLASHSALE_REDIS_SWEEP_INTERVAL" default:"1m"`
	// EventsRetention: how long a sequenced event is kept (for the events
	// API's catch-up) before it is deleted. Default 168h.
	EventsRetention time.Duration `envconfig:"FLASHSALE_EVENTS_RETENTION" default:"168h"`
	// EventsConfig configures the sinks the relay sends the events to.
	EventsConfig
}

// EventsConfig is the events' sinks' configuration, embedded in Config so
// its variables keep their names.
type EventsConfig = event.Config

// Defaults of Config: one constant per field, used when the field is zero.
const (
	MaxDeliveriesDefault     = 10
	IntervalDefault          = 5 * time.Second
	RoundTimeoutDefault      = time.Minute
	MaxPerRoundDefault       = 10000
	ConsumerGoneAfterDefault = 5 * time.Minute
	CheckIntervalDefault     = 5 * time.Minute
	EventsIntervalDefault    = time.Second
	EventsRetentionDefault   = 7 * 24 * time.Hour
	HotSplitAtDefault        = 100000
	HotSplitForDefault       = 5 * time.Second
	HotSplitAuto             = "auto"
	HotSplitOff              = "off"
	DetectIntervalDefault    = time.Second
	SweepIntervalDefault     = time.Minute
)

// SetDefaults fills the zero fields with the defaults.
func (c *Config) SetDefaults() {
	c.MaxDeliveries = cmp.Or(c.MaxDeliveries, MaxDeliveriesDefault)
	c.Interval = cmp.Or(c.Interval, IntervalDefault)
	c.RoundTimeout = cmp.Or(c.RoundTimeout, RoundTimeoutDefault)
	c.MaxPerRound = cmp.Or(c.MaxPerRound, MaxPerRoundDefault)
	c.ConsumerGoneAfter = cmp.Or(c.ConsumerGoneAfter, ConsumerGoneAfterDefault)
	for _, iv := range c.intervals()[1:] {
		*iv.d = cmp.Or(*iv.d, iv.def, c.Interval)
	}
	c.EventsRetention = cmp.Or(c.EventsRetention, EventsRetentionDefault)
	c.HotSplitAt = cmp.Or(c.HotSplitAt, HotSplitAtDefault)
	c.HotSplitFor = cmp.Or(c.HotSplitFor, HotSplitForDefault)
	c.HotSplit = cmp.Or(c.HotSplit, HotSplitAuto)
	c.RedisDurability = cmp.Or(c.RedisDurability, rdb.DurabilityNone)
	c.RedisMinReplicas = cmp.Or(c.RedisMinReplicas, rdb.MinReplicasDefault)
	c.RedisWaitTimeout = cmp.Or(c.RedisWaitTimeout, rdb.WaitTimeoutDefault)
	c.EventsConfig.SetDefaults()
	c.Config.SetDefaults()
}

// interval is one of the reaper's intervals, its variable and its
// default (zero: the reaper's interval).
type interval struct {
	env string
	d   *time.Duration
	def time.Duration
}

// intervals are the reaper's intervals: FLASHSALE_REAPER_INTERVAL first,
// then each service's own, which defaults to it unless it says otherwise.
func (c *Config) intervals() []interval {
	return []interval{
		{"FLASHSALE_REAPER_INTERVAL", &c.Interval, IntervalDefault},
		{"FLASHSALE_REAPER_RESCUE_INTERVAL", &c.RescueInterval, 0},
		{"FLASHSALE_REAPER_CONSUMERS_INTERVAL", &c.ConsumersInterval, 0},
		{"FLASHSALE_REAPER_EXPIRE_INTERVAL", &c.ExpireInterval, 0},
		{"FLASHSALE_REAPER_RELEASE_INTERVAL", &c.ReleaseInterval, 0},
		{"FLASHSALE_REAPER_REFUND_INTERVAL", &c.RefundInterval, 0},
		{"FLASHSALE_REAPER_CHECK_INTERVAL", &c.CheckInterval, CheckIntervalDefault},
		{"FLASHSALE_REAPER_EVENTS_INTERVAL", &c.EventsInterval, EventsIntervalDefault},
		{"FLASHSALE_REAPER_DETECT_INTERVAL", &c.DetectInterval, DetectIntervalDefault},
		{"FLASHSALE_REDIS_SWEEP_INTERVAL", &c.SweepInterval, SweepIntervalDefault},
	}
}

// Durability is the rdb form of the Redis durability settings (set on
// the reaper binary's store: rdb.Store.SetDurability).
func (c *Config) Durability() rdb.Durability {
	return rdb.Durability{Mode: c.RedisDurability, MinReplicas: c.RedisMinReplicas, Timeout: c.RedisWaitTimeout}
}

// Validate reports the first wrong value, naming its variable. Call it
// after SetDefaults.
func (c *Config) Validate() error {
	if err := c.Durability().Validate(); err != nil {
		return err
	}
	for _, iv := range c.intervals() {
		if *iv.d < time.Millisecond {
			return fmt.Errorf("%s must be at least 1ms, got %s", iv.env, *iv.d)
		}
	}
	switch {
	case c.MaxDeliveries < 1:
		return fmt.Errorf("FLASHSALE_MAX_DELIVERIES must be at least 1, got %d", c.MaxDeliveries)
	case c.EventsRetention < time.Minute:
		return fmt.Errorf("FLASHSALE_EVENTS_RETENTION must be at least 1m, got %s", c.EventsRetention)
	case c.HotSplitAt < 1:
		return fmt.Errorf("FLASHSALE_HOT_SPLIT_AT must be at least 1, got %d", c.HotSplitAt)
	case c.HotSplitFor < 0:
		return fmt.Errorf("FLASHSALE_HOT_SPLIT_FOR must not be negative, got %s", c.HotSplitFor)
	case c.HotSplit != HotSplitAuto && c.HotSplit != HotSplitOff:
		return fmt.Errorf("FLASHSALE_HOT_SPLIT must be auto or off, got %q", c.HotSplit)
	case c.RoundTimeout <= 0:
		return fmt.Errorf("FLASHSALE_REAPER_ROUND_TIMEOUT must be positive, got %s", c.RoundTimeout)
	case c.MaxPerRound < 1:
		return fmt.Errorf("FLASHSALE_REAPER_MAX_PER_ROUND must be at least 1, got %d", c.MaxPerRound)
	case c.ConsumerGoneAfter <= c.TakeoverMinIdle:
		// A consumer is removed only with nothing pending, but one idle for
		// less than the takeover min-idle may still be working on a batch.
		return fmt.Errorf("FLASHSALE_CONSUMER_GONE_AFTER (%s) must be longer than FLASHSALE_TAKEOVER_MIN_IDLE (%s)", c.ConsumerGoneAfter, c.TakeoverMinIdle)
	}
	if err := c.EventsConfig.Validate(); err != nil {
		return err
	}
	return c.Config.Validate()
}

// Reaper is the recovery and expiry role.
type Reaper struct {
	cfg   Config
	redis *rdb.Store
	// splitter runs the splits of vouchers' buckets owed (splitter.go).
	splitter *split.Splitter
	streams  *upkeep.Streams // taking over, consumers, dead letters
	// indexes trims the users' indexes of admissions (sweeper, trimmer).
	indexes *upkeep.Indexes
	db      *db.Store
	orders  *persist.Orders
	log     *zap.Logger
	now     func() time.Time
	audit   *zap.Logger
	metrics *metrics
	// relays: a loop a part of each events sink (event.Relays).
	relays []*event.Relay
	// detector is the detector's memory between its rounds.
	detector detector
	// forgotten is where the trimmer's forgetting of releases stopped.
	forgotten forgotten
	// pruned is where its pruning of the rooms' indexes stopped.
	pruned pruned
	// splitTarget is the buckets a hot voucher of n is split to
	// (WithSplitTarget).
	splitTarget func(ctx context.Context, v int64, n int) (int, error)
	// signals are where its tests act (export_test.go).
	signals testSignals
}

// testSignals are the points of the reaper's services where a test acts
// (export_test.go sets them; nil in production, each is skipped). The
// service waits while the test acts.
type testSignals struct {
	// lost: the restorer found voucher v lost and read the streams, and
	// has not yet read MySQL nor written.
	lost func(v int64)
	// creating: the restorer found voucher v just created with every
	// bucket but bucket 0, and is about to wait for it.
	creating func(v int64)
}

// Option changes a Reaper.
type Option func(*options)

type options struct {
	now         func() time.Time
	reg         prometheus.Registerer
	audit       *zap.Logger
	splitTarget func(ctx context.Context, v int64, n int) (int, error)
	signals     testSignals
}

// WithSplitTarget sets how many buckets a voucher of n marked hot is split
// to (default split.Splitter.Target: over every master of the cluster).
func WithSplitTarget(f func(ctx context.Context, v int64, n int) (int, error)) Option {
	return func(o *options) { o.splitTarget = f }
}

// WithClock replaces time.Now (the payment deadline check), for tests.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithRegistry registers the reaper's metrics, the metrics of the entries
// it processes and the streams' gauges with reg (default: a registry of its
// own, unexposed).
func WithRegistry(reg prometheus.Registerer) Option { return func(o *options) { o.reg = reg } }

// WithAudit sets the logger of the per-order audit lines (default: none).
func WithAudit(l *zap.Logger) Option { return func(o *options) { o.audit = l } }

// New returns a Reaper; cfg.Consumer names it in the consumer group.
func New(cfg Config, r *rdb.Store, d *db.Store, log *zap.Logger, opts ...Option) (*Reaper, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	o := options{now: time.Now, reg: prometheus.NewRegistry(), audit: zap.NewNop()}
	splitter := split.New(r)
	o.splitTarget = splitter.Target
	for _, opt := range opts {
		opt(&o)
	}
	if cfg.Consumer == "" {
		return nil, errors.New("reaper: consumer name is empty")
	}
	o.reg.MustRegister(upkeep.NewStreamCollector(r).ExportedBy(cfg.Consumer))
	log = log.Named("reaper").With(zap.String("consumer", cfg.Consumer))
	m := newMetrics(o.reg)
	relays, err := event.Relays(d, cfg.EventsConfig, cfg.Consumer, m.events, log)
	if err != nil {
		return nil, err
	}
	return &Reaper{cfg: cfg, redis: r, splitter: splitter, streams: upkeep.New(r), indexes: upkeep.NewIndexes(r), db: d, orders: persist.NewOrders(cfg.Config, r, d, log, o.audit, o.reg),
		now: o.now, audit: o.audit, metrics: m, log: log, relays: relays, splitTarget: o.splitTarget, signals: o.signals}, nil
}

// ServiceNames are the reaper's services, in the order a round runs them
// (docs/ARCHITECTURE.md, "The reaper's services", describes each).
func ServiceNames() []string {
	var r Reaper
	var names []string
	for _, s := range r.services(new(Results)) {
		names = append(names, s.name)
	}
	return names
}

// Run runs every service, each on its own interval (jittered by ±20%),
// until ctx ends; a round in progress is finished first.
func (r *Reaper) Run(ctx context.Context) error {
	r.log.Info("reaper started", zap.Duration("takeover_min_idle", r.cfg.TakeoverMinIdle), zap.Int64("max_deliveries", r.cfg.MaxDeliveries))
	var wg sync.WaitGroup
	// Each loop keeps its rounds' results in its own field, which nothing reads.
	for _, s := range r.services(new(Results)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.loop(ctx, s)
		}()
	}
	for _, rl := range r.relays {
		wg.Go(func() { rl.Run(ctx) })
	}
	wg.Wait()
	for _, rl := range r.relays {
		rl.Close()
	}
	r.log.Info("reaper stopped")
	return nil
}

// loop runs s's rounds until ctx ends.
func (r *Reaper) loop(ctx context.Context, s service) {
	for {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.RoundTimeout)
		res, err := s.round(pctx)
		cancel()
		r.record(s.name, res, err)
		jitter := time.Duration((rand.Float64()*0.4 - 0.2) * float64(s.interval))
		if backoff.Sleep(ctx, s.interval+jitter) != nil {
			return
		}
	}
}

// record logs and counts what a service's round did: a line of its
// result's counts that are not 0, each under its log tag (none when all
// are 0: the 20-odd things a round did not do are not news), and the
// metrics of the results that have some.
func (r *Reaper) record(name string, res any, err error) {
	if fields := logFields(res); len(fields) > 0 {
		r.log.Info("reaper round", append([]zap.Field{zap.String("service", name)}, fields...)...)
	}
	if err != nil {
		r.log.Warn("reaper round incomplete", zap.String("service", name), zap.Error(err))
	}
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	r.metrics.rounds.WithLabelValues(name, outcome).Inc()
	if c, ok := res.(counted); ok {
		c.count(r.metrics)
	}
}

// RunOnce runs one round of every service, in the order services lists
// them. Each is bounded; a failing one does not stop the others. Tests and tools call
// it; Run runs the services on their own intervals instead.
func (r *Reaper) RunOnce(ctx context.Context) (Results, error) {
	return r.runEach(ctx, func(string) bool { return true })
}

// RunOnly runs one round of each of the services named (ServiceNames),
// in the services' order: a benchmark's or a tool's reaper that must do
// one job and not the others.
func (r *Reaper) RunOnly(ctx context.Context, names ...string) (Results, error) {
	return r.runEach(ctx, func(name string) bool { return slices.Contains(names, name) })
}

// runEach runs one round of each service run says to, in order.
func (r *Reaper) runEach(ctx context.Context, run func(name string) bool) (Results, error) {
	var results Results
	var errs []error
	for _, s := range r.services(&results) {
		if !run(s.name) {
			continue
		}
		res, err := s.round(ctx)
		r.record(s.name, res, err)
		errs = append(errs, err)
	}
	return results, errors.Join(errs...)
}

// SequencerResult is what a round of the sequencer did.
type SequencerResult struct {
	// EventsSequenced are the order events given their sequence: every
	// second of a sale, counted, not logged.
	EventsSequenced int `log:"-"`
	// EventsDeleted are the order events deleted past their retention.
	EventsDeleted int `log:"events_deleted"`
}

// sequenceEvents is the sequencer (pkg/event): the events committed get
// their sequence, those past FLASHSALE_EVENTS_RETENTION are deleted.
func (r *Reaper) sequenceEvents(ctx context.Context, res *SequencerResult) error {
	var err error
	res.EventsSequenced, res.EventsDeleted, err = event.SequenceAndExpire(ctx, r.db, r.metrics.events, r.cfg.MaxPerRound, r.cfg.EventsRetention)
	return err
}
