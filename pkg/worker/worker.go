// Package worker persists admitted orders: it reads the order streams as one
// consumer of the workers' group, writes each batch to MySQL in one
// transaction and acknowledges the entries only after the commit.
package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// Defaults of Config.
const (
	DefaultBatchSize    = 100
	DefaultBlock        = time.Second
	DefaultDrainTimeout = 10 * time.Second
	DefaultRetryBackoff = 100 * time.Millisecond
	DefaultClaimMinIdle = 30 * time.Second
	maxRetryBackoff     = 5 * time.Second
)

// Config tunes a worker. Zero values take the defaults.
type Config struct {
	// BatchSize is the most entries read, and persisted in one transaction,
	// at a time per partition (XREADGROUP COUNT). Default 100.
	BatchSize int `envconfig:"FLASHSALE_WORKER_BATCH_SIZE" default:"100"`
	// Block is how long a read waits for new entries (XREADGROUP BLOCK); it
	// also bounds how long shutdown waits for a read. Default 1s.
	Block time.Duration `envconfig:"FLASHSALE_WORKER_BLOCK" default:"1s"`
	// Consumer names this process in the group. Default: the host name.
	Consumer string `envconfig:"FLASHSALE_CONSUMER_NAME"`
	// DrainTimeout bounds finishing the batch in hand after shutdown begins.
	DrainTimeout time.Duration `envconfig:"FLASHSALE_WORKER_DRAIN_TIMEOUT" default:"10s"`
	// RetryBackoff is the first pause after a failure; it doubles up to 5s.
	RetryBackoff time.Duration `envconfig:"FLASHSALE_WORKER_RETRY_BACKOFF" default:"100ms"`
	// ClaimMinIdle is how long an entry may sit unacknowledged before the
	// reaper takes it over. A worker renews its hold on the batch in hand
	// every third of it. Default 30s.
	ClaimMinIdle time.Duration `envconfig:"FLASHSALE_CLAIM_MIN_IDLE" default:"30s"`
}

// SetDefaults fills the zero fields with the defaults.
func (c *Config) SetDefaults() {
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.Block <= 0 {
		c.Block = DefaultBlock
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = DefaultRetryBackoff
	}
	if c.ClaimMinIdle <= 0 {
		c.ClaimMinIdle = DefaultClaimMinIdle
	}
}

// Worker is one consumer of the order streams.
type Worker struct {
	cfg   Config
	redis *rdb.Store
	db    *db.Store
	log   *zap.Logger

	audit   *zap.Logger
	metrics *metrics
}

// Option changes a Worker.
type Option func(*options)

type options struct {
	reg   prometheus.Registerer
	audit *zap.Logger
}

// WithRegistry registers the worker's metrics with reg (default: a registry
// of its own, unexposed).
func WithRegistry(reg prometheus.Registerer) Option { return func(o *options) { o.reg = reg } }

// WithAudit sets the logger of the per-order audit lines (default: none).
func WithAudit(l *zap.Logger) Option { return func(o *options) { o.audit = l } }

// New returns a Worker. cfg.Consumer must be set (cmd/worker defaults it to
// the host name).
func New(cfg Config, r *rdb.Store, d *db.Store, log *zap.Logger, opts ...Option) (*Worker, error) {
	cfg.SetDefaults()
	if cfg.Consumer == "" {
		return nil, errors.New("worker: consumer name is empty")
	}
	if log == nil {
		log = zap.NewNop()
	}
	o := options{reg: prometheus.NewRegistry(), audit: zap.NewNop()}
	for _, opt := range opts {
		opt(&o)
	}
	return &Worker{
		cfg: cfg, redis: r, db: d, metrics: newMetrics(o.reg),
		log:   log.Named("worker").With(zap.String("consumer", cfg.Consumer)),
		audit: o.audit.With(zap.String("consumer", cfg.Consumer)),
	}, nil
}

// Run consumes every partition until ctx is done, then finishes the batch in
// hand (up to DrainTimeout) and returns nil.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.redis.EnsureGroups(ctx); err != nil {
		return err
	}
	// work outlives ctx by DrainTimeout, so a batch read before shutdown is
	// committed and acknowledged rather than abandoned.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stopDrain := context.AfterFunc(ctx, func() {
		time.AfterFunc(w.cfg.DrainTimeout, cancelWork)
	})
	defer stopDrain()

	w.log.Info("worker started", zap.Int("partitions", w.redis.Partitions()), zap.Int("batch_size", w.cfg.BatchSize))
	g := new(errgroup.Group)
	for p := range w.redis.Partitions() {
		g.Go(func() error { return w.consume(ctx, work, p) })
	}
	err := g.Wait()
	w.log.Info("worker stopped")
	return err
}

// consume reads partition p: first this consumer's own pending entries (left
// by an earlier run under the same name), then new ones, until ctx ends.
func (w *Worker) consume(ctx, work context.Context, p int) error {
	log := w.log.With(zap.Int("partition", p))
	start := "0"
	backoff := w.cfg.RetryBackoff
	fail := func(msg string, err error) {
		log.Warn(msg, zap.Error(err), zap.Duration("retry_in", backoff))
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxRetryBackoff)
		start = "0" // whatever was read is still pending: read it again
	}
	for ctx.Err() == nil {
		entries, err := w.redis.ReadGroup(work, p, w.cfg.Consumer, start, w.cfg.BatchSize, w.cfg.Block)
		if err != nil {
			if rdb.IsNoGroup(err) {
				err = errors.Join(err, w.redis.EnsureGroups(work))
			}
			fail("read failed", err)
			continue
		}
		if len(entries) == 0 {
			start = ">" // own pending entries done (or none): read new ones
			continue
		}
		if err := w.Handle(work, entries); err != nil {
			fail("batch failed", err)
			continue
		}
		backoff = w.cfg.RetryBackoff
		if start != ">" {
			start = entries[len(entries)-1].StreamID
		}
	}
	return nil
}

// Handle persists a batch of entries of one partition and acknowledges them.
// Malformed entries go to the dead-letter stream. Orders MySQL refuses for
// want of stock are recorded as failed and their Redis reservation is given
// back. A batch the database rejects as a whole is retried one order at a
// time; an order refused on its own is dead-lettered and released. Transient
// failures are retried with backoff until ctx ends; an error return leaves
// the entries pending, to be read again. The reaper calls Handle for the
// entries it claims.
// A panic (a bug) is recovered: the batch is retried entry by entry and
// only an entry that panics on its own is dead-lettered.
func (w *Worker) Handle(ctx context.Context, entries []rdb.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	defer w.holdLease(ctx, entries)()
	panicked, err := guard(func() error { return w.handle(ctx, entries) })
	if panicked == nil {
		return err
	}
	w.log.Error("panic while handling a batch; retrying entry by entry", zap.Any("panic", panicked), zap.Stack("stack"))
	for _, e := range entries {
		panicked, err := guard(func() error { return w.handle(ctx, []rdb.Entry{e}) })
		if panicked != nil {
			err = w.DeadLetter(ctx, e, fmt.Sprintf("panic: %v", panicked))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// guard runs f and turns a panic into a value.
func guard(f func() error) (panicked any, err error) {
	defer func() { panicked = recover() }()
	return nil, f()
}

func (w *Worker) handle(ctx context.Context, entries []rdb.Entry) error {
	p := entries[0].Partition
	valid := make([]rdb.Entry, 0, len(entries))
	for _, e := range entries {
		if e.Err != nil {
			if err := w.DeadLetter(ctx, e, "malformed: "+e.Err.Error()); err != nil {
				return err
			}
			continue
		}
		valid = append(valid, e)
	}
	if len(valid) == 0 {
		return nil
	}
	orders := make([]order.Order, len(valid))
	for i, e := range valid {
		orders[i] = e.Order
	}
	t0 := time.Now()
	outcomes, err := w.persist(ctx, orders)
	w.metrics.commitSeconds.Observe(time.Since(t0).Seconds())
	w.metrics.batchSize.Observe(float64(len(orders)))
	if err != nil {
		if db.IsTransient(err) {
			return err
		}
		w.log.Warn("batch rejected, retrying order by order", zap.Int("partition", p), zap.Int("batch_size", len(valid)), zap.Error(err))
		return w.handleOneByOne(ctx, valid)
	}
	return w.settle(ctx, valid, outcomes)
}

func (w *Worker) handleOneByOne(ctx context.Context, entries []rdb.Entry) error {
	for _, e := range entries {
		out, err := w.persist(ctx, []order.Order{e.Order})
		if err != nil {
			if db.IsTransient(err) {
				return err
			}
			if err := w.DeadLetter(ctx, e, "rejected by mysql: "+err.Error()); err != nil {
				return err
			}
			continue
		}
		if err := w.settle(ctx, []rdb.Entry{e}, out); err != nil {
			return err
		}
	}
	return nil
}

// holdLease renews this consumer's hold on entries every third of
// ClaimMinIdle until the returned stop is called.
func (w *Worker) holdLease(ctx context.Context, entries []rdb.Entry) (stop func()) {
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.StreamID
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(w.cfg.ClaimMinIdle / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if _, err := w.redis.RenewLease(ctx, entries[0].Partition, w.cfg.Consumer, ids); err != nil && ctx.Err() == nil {
					w.log.Warn("renew lease failed", zap.Error(err))
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// settle gives back the reservations of failed orders, then acknowledges.
func (w *Worker) settle(ctx context.Context, entries []rdb.Entry, outcomes []db.Outcome) error {
	ack := make([]string, 0, len(entries))
	var failedOrders []order.Order
	var created, failed, redelivered int64
	for i, out := range outcomes {
		e := entries[i]
		if out.Conflict {
			if err := w.deadLetter(ctx, e, "order id held by another order", false); err != nil {
				return err
			}
			continue
		}
		if out.Redelivered {
			redelivered++
		}
		switch {
		case out.Status == order.StatusFailed:
			// Also for a re-delivered failed order: the release may not have
			// happened before the crash that caused the re-delivery.
			failedOrders = append(failedOrders, out.Order)
			if !out.Redelivered {
				failed++
				w.audit.Warn("order failed", orderFields(e, zap.String("reason", out.Reason))...)
			}
		case !out.Redelivered:
			created++
			w.audit.Info("order created", orderFields(e)...)
		}
		ack = append(ack, e.StreamID)
	}
	if err := w.release(ctx, failedOrders); err != nil {
		return err
	}
	if err := w.redis.Ack(ctx, entries[0].Partition, ack); err != nil {
		return err
	}
	w.metrics.batches.Inc()
	w.metrics.created.Add(float64(created))
	w.metrics.failed.Add(float64(failed))
	w.metrics.redelivered.Add(float64(redelivered))
	if ce := w.log.Check(zap.DebugLevel, "batch persisted"); ce != nil {
		ce.Write(zap.Int("partition", entries[0].Partition), zap.Int("batch_size", len(entries)), zap.Int64("created", created), zap.Int64("failed", failed))
	}
	return nil
}

// release gives Redis back the reservations of orders (exactly once: see
// release.lua) and records that in MySQL's releases.
func (w *Worker) release(ctx context.Context, orders []order.Order) error {
	if len(orders) == 0 {
		return nil
	}
	ids := make([]int64, 0, len(orders))
	for _, o := range orders {
		if err := w.retry(ctx, "release", func() error {
			_, err := w.redis.Release(ctx, o)
			return err
		}); err != nil {
			return err
		}
		ids = append(ids, o.ID)
	}
	return w.retry(ctx, "mark released", func() error { return w.db.MarkReleased(ctx, ids, time.Now().UTC()) })
}

// DeadLetter moves e to its partition's dead-letter stream with reason and
// acknowledges it. A well-formed order is first recorded as failed in MySQL
// and its reservation given back, exactly once; an order that turns out to
// be persisted already is only acknowledged. The reaper calls it for
// entries delivered too often.
func (w *Worker) DeadLetter(ctx context.Context, e rdb.Entry, reason string) error {
	if e.Err != nil {
		return w.deadLetter(ctx, e, reason, false)
	}
	var status order.Status
	err := w.retry(ctx, "record failed", func() error {
		var err error
		status, err = w.db.RecordFailed(ctx, e.Order, db.ReasonDeadLetter)
		if err != nil && !db.IsTransient(err) {
			return permanent{err}
		}
		return err
	})
	var perm permanent
	switch {
	case errors.As(err, &perm):
		// MySQL refuses the row itself: nothing to record, still release.
		return w.deadLetter(ctx, e, reason, true)
	case err != nil:
		return err
	case status != order.StatusFailed:
		w.log.Info("dead-letter candidate is persisted already; acknowledged", zap.Int64("order_id", e.Order.ID), zap.String("status", string(status)))
		return w.redis.Ack(ctx, e.Partition, []string{e.StreamID})
	}
	return w.deadLetter(ctx, e, reason, true)
}

func (w *Worker) deadLetter(ctx context.Context, e rdb.Entry, reason string, release bool) error {
	if release {
		if err := w.release(ctx, []order.Order{e.Order}); err != nil {
			return err
		}
	}
	if err := w.retry(ctx, "dead-letter", func() error { return w.redis.DeadLetter(ctx, e, reason) }); err != nil {
		return err
	}
	w.metrics.deadLettered.Inc()
	w.audit.Warn("order dead-lettered", orderFields(e, zap.String("stream_id", e.StreamID), zap.String("reason", reason))...)
	return nil
}

// orderFields are the fields of an order's audit line.
func orderFields(e rdb.Entry, more ...zap.Field) []zap.Field {
	return append([]zap.Field{zap.Int64("order_id", e.Order.ID), zap.Int64("voucher_id", e.Order.VoucherID),
		zap.String("user_id", e.Order.UserID), zap.Int("partition", e.Partition)}, more...)
}

func (w *Worker) persist(ctx context.Context, orders []order.Order) ([]db.Outcome, error) {
	var out []db.Outcome
	err := w.retry(ctx, "persist", func() error {
		var err error
		out, err = w.db.PersistBatch(ctx, orders)
		if err != nil && !db.IsTransient(err) {
			return permanent{err}
		}
		return err
	})
	var perm permanent
	if errors.As(err, &perm) {
		return nil, perm.error
	}
	return out, err
}

type permanent struct{ error }

// retry runs op until it succeeds, fails permanently, or ctx ends.
func (w *Worker) retry(ctx context.Context, what string, op func() error) error {
	backoff := w.cfg.RetryBackoff
	for attempt := 1; ; attempt++ {
		err := op()
		var perm permanent
		if err == nil || errors.As(err, &perm) {
			return err
		}
		if attempt == 1 || attempt%10 == 0 {
			w.log.Warn(what+" failed, retrying", zap.Int("attempt", attempt), zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last error: %v)", what, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxRetryBackoff)
	}
}
