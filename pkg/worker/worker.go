// Package worker is the worker role: the reader of the order streams. It
// reads them as one consumer of the workers' group (a reader per
// partition, its own pending entries first), keeps its liveness key, and
// hands each batch read to pkg/persist, which owns persisting orders and
// what happens when that fails (persist.Orders.Process).
package worker

import (
	"context"
	"errors"
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
	log   *zap.Logger

	orders      *persist.Orders
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
		cfg: cfg, redis: r, log: log, countsEvery: o.countsEvery,
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
	defer ops.StartCounts(ctx, w.log, w.countsEvery, "worker counts", w.orders.Counts)()
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
		orders, err := w.redis.ReadGroup(work, p, w.cfg.Consumer, cursor, count, w.cfg.Block)
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
		if len(orders) == 0 {
			cursor = ">" // own pending entries done (or none): read new ones
			continue
		}
		count = max(1, w.cfg.BatchSize*len(rdb.StreamIDs(orders))/len(orders))
		w.orders.Process(work, orders)
		if cursor != ">" {
			cursor = orders[len(orders)-1].StreamID
		}
	}
	return nil
}
