// Package worker is the worker role: it reads the order streams as one
// consumer of the workers' group (a reader per partition) and hands each
// batch to pkg/persist, which owns persisting orders (one transaction,
// then the acknowledgement); the worker retries a batch that fails, waits
// out a MySQL that takes no writes, and tries order by order what cannot
// succeed as a whole.
package worker

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/flashsale/flashsale/pkg/backoff"
	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/ops"
	"github.com/flashsale/flashsale/pkg/persist"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// Worker is one consumer of the order streams.
type Worker struct {
	cfg   Config
	redis *rdb.Store
	db    *db.Store
	log   *zap.Logger

	orders      *persist.Orders
	metrics     *metrics
	countsEvery time.Duration
}

// Option changes a Worker.
type Option func(*options)

type options struct {
	reg         prometheus.Registerer
	audit       *zap.Logger
	countsEvery time.Duration
}

// WithCountsEvery logs the worker's counts every d instead of
// ops.CountsEvery, for tests.
func WithCountsEvery(d time.Duration) Option { return func(o *options) { o.countsEvery = d } }

// WithRegistry registers the worker's metrics with reg (default: a registry
// of its own, unexposed).
func WithRegistry(reg prometheus.Registerer) Option { return func(o *options) { o.reg = reg } }

// WithAudit sets the logger of the per-order audit lines (default: none).
func WithAudit(l *zap.Logger) Option { return func(o *options) { o.audit = l } }

// New returns a Worker. cfg.Consumer must be set (cmd/worker defaults it to
// the host name).
func New(cfg Config, r *rdb.Store, d *db.Store, log *zap.Logger, opts ...Option) (*Worker, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Consumer == "" {
		return nil, errors.New("worker: consumer name is empty")
	}
	if log == nil {
		log = zap.NewNop()
	}
	o := options{reg: prometheus.NewRegistry(), audit: zap.NewNop(), countsEvery: ops.CountsEvery}
	for _, opt := range opts {
		opt(&o)
	}
	log = log.Named("worker").With(zap.String("consumer", cfg.Consumer))
	return &Worker{
		cfg: cfg, redis: r, db: d, metrics: newMetrics(o.reg), log: log, countsEvery: o.countsEvery,
		orders: persist.NewOrders(cfg, r, d, log, o.audit, o.reg),
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
	defer ops.StartCounts(ctx, w.log, w.countsEvery, "worker counts", w.counts)()
	g := new(errgroup.Group)
	for p := range w.redis.Partitions() {
		g.Go(func() error { return w.consume(ctx, work, p) })
	}
	err := g.Wait()
	w.log.Info("worker stopped")
	return err
}

// counts are the worker's counts for its log: orders by outcome,
// batches, and failed attempts at a batch (each retried).
func (w *Worker) counts() map[string]int64 {
	c := w.orders.Counts()
	c["batch_retries"] = ops.CounterValue(w.metrics.retries)
	return c
}

// consume reads partition p: first this consumer's own pending entries (left
// by an earlier run under the same name), then new ones, until ctx ends.
func (w *Worker) consume(ctx, work context.Context, p int) error {
	log := w.log.With(zap.Int("partition", p))
	cursor := "0" // own pending entries after cursor; ">" for new ones
	bo := backoff.New(w.cfg.RetryBackoff, backoff.MaxDefault)
	// A stream entry carries the orders of one admission call (1 to 32):
	// read as many entries as make about BatchSize orders at the last
	// read's orders per entry.
	count := w.cfg.BatchSize
	var alive time.Time // when the liveness key was last renewed
	for ctx.Err() == nil {
		if now := time.Now(); now.Sub(alive) >= rdb.ConsumerAliveTTL/3 {
			if err := w.redis.Alive(work, p, w.cfg.Consumer); err != nil {
				log.Warn("liveness not renewed", zap.Error(err))
			} else {
				alive = now
			}
		}
		entries, err := w.redis.ReadGroup(work, p, w.cfg.Consumer, cursor, count, w.cfg.Block)
		if err != nil {
			if rdb.IsNoGroup(err) {
				err = errors.Join(err, w.redis.EnsureGroups(work))
			}
			log.Warn("read failed", zap.Error(err))
			_ = bo.Wait(ctx)
			// A read whose answer was lost may still have delivered
			// entries to this consumer: look at its own pending ones first.
			cursor = "0"
			continue
		}
		bo.Reset()
		if len(entries) == 0 {
			cursor = ">" // own pending entries done (or none): read new ones
			continue
		}
		count = max(1, w.cfg.BatchSize*len(rdb.StreamIDs(entries))/len(entries))
		w.process(work, entries)
		if cursor != ">" {
			cursor = entries[len(entries)-1].StreamID
		}
	}
	return nil
}

// process persists a batch read by this worker, holding its lease all the
// while. A failure is retried with backoff. After MaxAttempts failures the
// worker asks MySQL whether it accepts writes at all: if not, the store is
// out and the batch waits, however long the outage lasts, neither failed
// nor released; if it does, the batch is what cannot succeed, and it is
// tried entry by entry, an entry failing alone being left to the reaper.
// process returns when every entry is acknowledged or left, or ctx ends.
func (w *Worker) process(ctx context.Context, entries []rdb.StreamOrder) {
	defer w.orders.HoldLease(ctx, entries)()
	bo := backoff.New(w.cfg.RetryBackoff, backoff.MaxDefault)
	for attempt := 1; ; attempt++ {
		err := w.orders.Try(ctx, entries)
		if err == nil || ctx.Err() != nil {
			return
		}
		w.metrics.retries.Inc()
		log := w.log.With(append(ops.TraceFields(ctx), zap.Int("partition", entries[0].Partition), zap.Int("batch_size", len(entries)), zap.Int("attempt", attempt))...)
		if attempt >= w.cfg.MaxAttempts {
			if perr := w.db.Writable(ctx, w.cfg.Consumer); perr == nil {
				log.Error("batch keeps failing while mysql accepts writes; trying entry by entry", zap.Error(err))
				w.oneLastTry(ctx, entries)
				return
			} else if attempt == w.cfg.MaxAttempts || attempt%10 == 0 {
				log.Warn("mysql does not accept writes; the batch waits", zap.Error(err), zap.NamedError("probe", perr))
			}
		} else if attempt == 1 || attempt%10 == 0 {
			log.Warn("batch failed; retrying", zap.Error(err), zap.String("class", db.Classify(err).String()))
		}
		if bo.Wait(ctx) != nil {
			return
		}
	}
}

// oneLastTry tries each order of a batch that cannot succeed as a whole
// once on its own, and acknowledges the stream entries whose orders all
// succeeded. A stream entry with an order that still fails is left pending
// without a lease, so the reaper takes it over and counts its deliveries
// (its orders persisted here are found persisted then).
func (w *Worker) oneLastTry(ctx context.Context, entries []rdb.StreamOrder) {
	failed := map[string]bool{}
	for _, e := range entries {
		if err := w.orders.Persist(ctx, []rdb.StreamOrder{e}); err != nil {
			failed[e.StreamID] = true
			w.metrics.abandoned.Inc()
			w.log.Error("order cannot be persisted; its stream entry is left to the reaper", zap.Int("partition", e.Partition),
				zap.String("stream_id", e.StreamID), zap.Int64("order_id", e.Order.ID), zap.Error(err))
		}
	}
	done := slices.DeleteFunc(slices.Clone(entries), func(e rdb.StreamOrder) bool { return failed[e.StreamID] })
	if err := w.orders.Ack(ctx, done); err != nil {
		w.log.Error("acknowledging the persisted entries failed; they are left to the reaper", zap.Error(err))
	}
}

// Handle makes one attempt at a batch of entries of one partition (see
// persist.Orders.Handle).
func (w *Worker) Handle(ctx context.Context, entries []rdb.StreamOrder) error {
	return w.orders.Handle(ctx, entries)
}
