// Package reaper keeps the pipeline's promises when processes die and users
// do not pay: it takes over entries left pending by workers that went away
// (XAUTOCLAIM), dead-letters entries delivered too often, removes consumers
// that are gone, cancels orders not paid in time and gives their units back
// to MySQL and Redis exactly once. Several reapers may run at once: every
// step is either atomic in Redis (XAUTOCLAIM), skips rows another reaper
// holds (SKIP LOCKED), or is idempotent (releases).
package reaper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/settle"
	"github.com/flashsale/flashsale/pkg/worker"
)

// Config of the reaper. Zero values take the defaults.
type Config struct {
	// Worker configures how claimed entries are processed: the same code
	// and settings as a worker (batch size, claim min-idle, consumer name).
	worker.Config
	// MaxDeliveries: an entry delivered more often goes to the dead-letter
	// stream, its order recorded as failed. Default 10.
	MaxDeliveries int64 `envconfig:"FLASHSALE_MAX_DELIVERIES" default:"10"`
	// Interval between passes (jittered by ±20%). Default 5s.
	Interval time.Duration `envconfig:"FLASHSALE_REAPER_INTERVAL" default:"5s"`
	// PassTimeout bounds one pass. Default 1m.
	PassTimeout time.Duration `envconfig:"FLASHSALE_REAPER_PASS_TIMEOUT" default:"1m"`
	// MaxPerPass bounds the cancellations and releases of one pass, so a
	// pass ends and starts over with fresh claims. Default 10000.
	MaxPerPass int `envconfig:"FLASHSALE_REAPER_MAX_PER_PASS" default:"10000"`
	// ConsumerGoneAfter: a consumer idle this long with nothing pending is
	// removed from the group. Default 5m.
	ConsumerGoneAfter time.Duration `envconfig:"FLASHSALE_CONSUMER_GONE_AFTER" default:"5m"`
}

// Defaults of Config: one constant per field, used when the field is zero.
const (
	MaxDeliveriesDefault     = 10
	IntervalDefault          = 5 * time.Second
	PassTimeoutDefault       = time.Minute
	MaxPerPassDefault        = 10000
	ConsumerGoneAfterDefault = 5 * time.Minute
)

// SetDefaults fills the zero fields with the defaults.
func (c *Config) SetDefaults() {
	c.MaxDeliveries = cmp.Or(c.MaxDeliveries, MaxDeliveriesDefault)
	c.Interval = cmp.Or(c.Interval, IntervalDefault)
	c.PassTimeout = cmp.Or(c.PassTimeout, PassTimeoutDefault)
	c.MaxPerPass = cmp.Or(c.MaxPerPass, MaxPerPassDefault)
	c.ConsumerGoneAfter = cmp.Or(c.ConsumerGoneAfter, ConsumerGoneAfterDefault)
	c.Config.SetDefaults()
}

// Validate reports the first wrong value, naming its variable. Call it
// after SetDefaults.
func (c *Config) Validate() error {
	switch {
	case c.MaxDeliveries < 1:
		return fmt.Errorf("FLASHSALE_MAX_DELIVERIES must be at least 1, got %d", c.MaxDeliveries)
	case c.Interval < time.Millisecond:
		return fmt.Errorf("FLASHSALE_REAPER_INTERVAL must be at least 1ms, got %s", c.Interval)
	case c.PassTimeout <= 0:
		return fmt.Errorf("FLASHSALE_REAPER_PASS_TIMEOUT must be positive, got %s", c.PassTimeout)
	case c.MaxPerPass < 1:
		return fmt.Errorf("FLASHSALE_REAPER_MAX_PER_PASS must be at least 1, got %d", c.MaxPerPass)
	case c.ConsumerGoneAfter <= c.ClaimMinIdle:
		// A consumer is removed only with nothing pending, but one idle for
		// less than the claim min-idle may still be working on a batch.
		return fmt.Errorf("FLASHSALE_CONSUMER_GONE_AFTER (%s) must be longer than FLASHSALE_CLAIM_MIN_IDLE (%s)", c.ConsumerGoneAfter, c.ClaimMinIdle)
	}
	return c.Config.Validate()
}

// Reaper is the recovery and expiry role.
type Reaper struct {
	cfg     Config
	redis   *rdb.Store
	db      *db.Store
	worker  *worker.Worker
	log     *zap.Logger
	now     func() time.Time
	audit   *zap.Logger
	metrics *metrics
}

// Option changes a Reaper.
type Option func(*options)

type options struct {
	now   func() time.Time
	reg   prometheus.Registerer
	audit *zap.Logger
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
	for _, opt := range opts {
		opt(&o)
	}
	w, err := worker.New(cfg.Config, r, d, log, worker.WithRegistry(o.reg), worker.WithAudit(o.audit))
	if err != nil {
		return nil, err
	}
	o.reg.MustRegister(rdb.NewStreamCollector(r))
	return &Reaper{cfg: cfg, redis: r, db: d, worker: w, now: o.now, audit: o.audit, metrics: newMetrics(o.reg),
		log: log.Named("reaper").With(zap.String("consumer", cfg.Consumer))}, nil
}

// Pass is what one pass did.
type Pass struct {
	Claimed          int // stale entries taken over and processed
	DeadLettered     int // entries delivered more than MaxDeliveries times
	DeletedAcked     int // pending entries no longer in the stream
	ConsumersRemoved int
	Cancelled        int // orders not paid in time
	ReleasedToRedis  int // releases Redis got (cancellations, failures)
}

func (p Pass) idle() bool { return p == Pass{} }

// Run runs a pass every Interval (jittered) until ctx ends; a pass in
// progress is finished first.
func (r *Reaper) Run(ctx context.Context) error {
	r.log.Info("reaper started", zap.Duration("claim_min_idle", r.cfg.ClaimMinIdle), zap.Int64("max_deliveries", r.cfg.MaxDeliveries))
	for {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.PassTimeout)
		pass, err := r.RunOnce(pctx)
		cancel()
		if !pass.idle() {
			r.log.Info("reaper pass", zap.Int("claimed", pass.Claimed), zap.Int("dead_lettered", pass.DeadLettered),
				zap.Int("deleted_acked", pass.DeletedAcked), zap.Int("consumers_removed", pass.ConsumersRemoved),
				zap.Int("cancelled", pass.Cancelled), zap.Int("released_to_redis", pass.ReleasedToRedis))
		}
		if err != nil {
			r.log.Warn("reaper pass incomplete", zap.Error(err))
		}
		jitter := time.Duration((rand.Float64()*0.4 - 0.2) * float64(r.cfg.Interval))
		select {
		case <-ctx.Done():
			r.log.Info("reaper stopped")
			return nil
		case <-time.After(r.cfg.Interval + jitter):
		}
	}
}

// RunOnce is one pass: reclaim and dead-letter on every partition, remove
// gone consumers, cancel expired orders, and give Redis the releases it is
// owed. Each step is bounded; a failing step does not stop the others.
func (r *Reaper) RunOnce(ctx context.Context) (Pass, error) {
	var pass Pass
	var errs []error
	for p := range r.redis.Partitions() {
		errs = append(errs, r.reclaim(ctx, p, &pass))
		removed, err := r.redis.RemoveGoneConsumers(ctx, p, r.cfg.ConsumerGoneAfter, r.cfg.Consumer)
		for _, name := range removed {
			r.log.Info("consumer removed", zap.Int("partition", p), zap.String("removed", name))
		}
		pass.ConsumersRemoved += len(removed)
		errs = append(errs, err)
	}
	errs = append(errs, r.cancelExpired(ctx, &pass), r.releaseOwed(ctx, &pass))
	r.metrics.passes.Inc()
	r.metrics.claimed.Add(float64(pass.Claimed))
	r.metrics.deadLetters.Add(float64(pass.DeadLettered))
	r.metrics.cancelled.Add(float64(pass.Cancelled))
	r.metrics.released.Add(float64(pass.ReleasedToRedis))
	r.metrics.consumersRemoved.Add(float64(pass.ConsumersRemoved))
	return pass, errors.Join(errs...)
}

// reclaim pages through partition p's stale pending entries with
// XAUTOCLAIM until the cursor comes back to 0-0. It claims nothing while
// MySQL refuses writes: each claim counts a delivery, and an outage must
// not push entries towards the dead-letter stream. An entry delivered more
// than MaxDeliveries times gets one last ordinary attempt, and is
// dead-lettered only if that fails while MySQL accepts writes.
func (r *Reaper) reclaim(ctx context.Context, p int, pass *Pass) error {
	if err := r.db.Writable(ctx, r.cfg.Consumer); err != nil {
		return fmt.Errorf("partition %d: not reclaiming while mysql refuses writes: %w", p, err)
	}
	cursor := "0-0"
	for {
		c, err := r.redis.AutoClaim(ctx, p, r.cfg.Consumer, r.cfg.ClaimMinIdle, cursor, r.cfg.BatchSize)
		if err != nil {
			return err
		}
		pass.DeletedAcked += len(c.Deleted)
		if len(c.Deleted) > 0 {
			r.log.Error("pending entries were deleted from the stream before being persisted", zap.Int("partition", p), zap.Strings("stream_ids", c.Deleted))
		}
		var fresh, worn []rdb.Entry
		for _, e := range c.Entries {
			if c.Deliveries[e.StreamID] > r.cfg.MaxDeliveries {
				worn = append(worn, e)
			} else {
				fresh = append(fresh, e)
			}
		}
		// The same code as a worker's batch: idempotent, ack after commit.
		if err := r.worker.Handle(ctx, fresh); err != nil {
			return fmt.Errorf("partition %d: %w", p, err)
		}
		pass.Claimed += len(fresh)
		for _, e := range worn {
			dead, err := r.retire(ctx, e, c.Deliveries[e.StreamID])
			if err != nil {
				return fmt.Errorf("partition %d: %w", p, err)
			}
			if dead {
				pass.DeadLettered++
			} else {
				pass.Claimed++
			}
		}
		if c.Next == "0-0" || c.Next == "" {
			return nil
		}
		cursor = c.Next
	}
}

// retire decides an entry delivered n > MaxDeliveries times: one last
// ordinary attempt, and the dead-letter stream (with a recorded failure and
// its unit given back) only if that fails while MySQL accepts writes.
func (r *Reaper) retire(ctx context.Context, e rdb.Entry, n int64) (deadLettered bool, err error) {
	lastErr := r.worker.Handle(ctx, []rdb.Entry{e})
	if lastErr == nil {
		return false, nil
	}
	if err := r.db.Writable(ctx, r.cfg.Consumer); err != nil {
		return false, fmt.Errorf("entry %s delivered %d times waits: mysql refuses writes: %w", e.StreamID, n, err)
	}
	reason := fmt.Sprintf("delivered %d times; last error: %v", n, lastErr)
	if err := r.worker.DeadLetter(ctx, e, reason); err != nil {
		return false, err
	}
	return true, nil
}

// cancelExpired cancels unpaid orders past their deadline in batches.
func (r *Reaper) cancelExpired(ctx context.Context, pass *Pass) error {
	for pass.Cancelled < r.cfg.MaxPerPass {
		rs, err := r.db.CancelExpired(ctx, r.now().UTC(), r.cfg.BatchSize)
		if err != nil {
			return err
		}
		for _, rel := range rs {
			r.audit.Info("order cancelled", zap.Int64("order_id", rel.OrderID), zap.Int64("voucher_id", rel.VoucherID),
				zap.String("user_id", rel.UserID), zap.String("reason", rel.Reason))
		}
		pass.Cancelled += len(rs)
		if len(rs) < r.cfg.BatchSize {
			return nil
		}
	}
	return nil
}

// releaseOwed gives Redis the units MySQL has taken back (cancellations,
// and failures whose worker died before releasing), exactly once each (see
// pkg/settle).
func (r *Reaper) releaseOwed(ctx context.Context, pass *Pass) error {
	n, err := settle.Owed(ctx, r.redis, r.db, r.cfg.BatchSize, r.cfg.MaxPerPass, r.now)
	pass.ReleasedToRedis += n
	return err
}
