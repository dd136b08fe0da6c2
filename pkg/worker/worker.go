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

	"github.com/flashsale/flashsale/pkg/app"
	"github.com/flashsale/flashsale/pkg/backoff"
	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/settle"
)

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
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
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
	cursor := "0" // own pending entries after cursor; ">" for new ones
	bo := backoff.New(w.cfg.RetryBackoff, backoff.MaxDefault)
	for ctx.Err() == nil {
		entries, err := w.redis.ReadGroup(work, p, w.cfg.Consumer, cursor, w.cfg.BatchSize, w.cfg.Block)
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
func (w *Worker) process(ctx context.Context, entries []rdb.Entry) {
	defer w.holdLease(ctx, entries)()
	bo := backoff.New(w.cfg.RetryBackoff, backoff.MaxDefault)
	for attempt := 1; ; attempt++ {
		err := w.try(ctx, entries)
		if err == nil || ctx.Err() != nil {
			return
		}
		w.metrics.retries.Inc()
		log := w.log.With(append(app.TraceFields(ctx), zap.Int("partition", entries[0].Partition), zap.Int("batch_size", len(entries)), zap.Int("attempt", attempt))...)
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

// oneLastTry tries each entry of a batch that cannot succeed as a whole once
// on its own. An entry that still fails is left pending without a lease, so
// the reaper takes it over and counts its deliveries.
func (w *Worker) oneLastTry(ctx context.Context, entries []rdb.Entry) {
	for _, e := range entries {
		if err := w.try(ctx, []rdb.Entry{e}); err != nil {
			w.metrics.abandoned.Inc()
			w.log.Error("entry cannot be persisted; left to the reaper", zap.Int("partition", e.Partition),
				zap.String("stream_id", e.StreamID), zap.Int64("order_id", e.Order.ID), zap.Error(err))
		}
	}
}

// Handle makes one attempt at a batch of entries of one partition, holding
// their lease meanwhile, and acknowledges what it settled. An error leaves
// the entries pending, to be tried again; nothing was failed or released
// for it. Malformed entries go to the dead-letter stream; orders MySQL
// refuses for want of stock or by the per-user limit are recorded failed and
// their units given back; a batch MySQL refuses for the values of its rows
// is tried order by order (see handleOneByOne). The reaper calls Handle for
// the entries it claims.
// A panic (a bug) is recovered: the batch is retried entry by entry and
// only an entry that panics on its own is dead-lettered.
func (w *Worker) Handle(ctx context.Context, entries []rdb.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	defer w.holdLease(ctx, entries)()
	return w.try(ctx, entries)
}

// try is Handle without the lease.
func (w *Worker) try(ctx context.Context, entries []rdb.Entry) error {
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
	valid := make([]rdb.Entry, 0, len(entries))
	for _, e := range entries {
		if e.Err != nil {
			if err := w.deadLetter(ctx, e, "malformed: "+e.Err.Error(), nil); err != nil {
				return err
			}
			continue
		}
		valid = append(valid, e)
	}
	if len(valid) == 0 {
		return nil
	}
	t0 := time.Now()
	outcomes, err := w.db.PersistBatch(ctx, ordersOf(valid))
	w.metrics.commitSeconds.Observe(time.Since(t0).Seconds())
	w.metrics.batchSize.Observe(float64(len(valid)))
	switch {
	case err == nil:
		return w.settle(ctx, valid, outcomes)
	case db.IsRowError(err):
		return w.handleOneByOne(ctx, valid, err)
	default:
		return fmt.Errorf("persist batch of %d: %w", len(valid), err)
	}
}

func ordersOf(entries []rdb.Entry) []order.Order {
	orders := make([]order.Order, len(entries))
	for i, e := range entries {
		orders[i] = e.Order
	}
	return orders
}

// handleOneByOne persists a batch MySQL refused for the values of its rows
// one order at a time, and fails (dead-letters) the orders refused on their
// own. If every order of a batch of several is refused with the same error,
// no row is at fault but the store (a column shortened, a CHECK added): that
// is an outage, and nothing is failed.
func (w *Worker) handleOneByOne(ctx context.Context, entries []rdb.Entry, batchErr error) error {
	w.log.Warn("batch refused for its values; trying order by order", zap.Int("partition", entries[0].Partition),
		zap.Int("batch_size", len(entries)), zap.Error(batchErr))
	outs := make([][]db.Outcome, len(entries))
	errs := make([]error, len(entries))
	refused, same := 0, true
	for i, e := range entries {
		outs[i], errs[i] = w.db.PersistBatch(ctx, []order.Order{e.Order})
		switch {
		case errs[i] == nil:
		case !db.IsRowError(errs[i]):
			return fmt.Errorf("persist order %d: %w", e.Order.ID, errs[i])
		default:
			refused++
			same = same && db.ErrorNumber(errs[i]) == db.ErrorNumber(errs[0])
		}
	}
	if len(entries) > 1 && refused == len(entries) && same {
		return fmt.Errorf("every order of the batch refused the same way, taken as an outage: %w", errs[0])
	}
	for i, e := range entries {
		var err error
		if errs[i] != nil {
			err = w.DeadLetter(ctx, e, "rejected by mysql: "+errs[i].Error())
		} else {
			err = w.settle(ctx, []rdb.Entry{e}, outs[i])
		}
		if err != nil {
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

// settle gives back the units of the orders MySQL recorded failed, then
// acknowledges.
func (w *Worker) settle(ctx context.Context, entries []rdb.Entry, outcomes []db.Outcome) error {
	ack := make([]string, 0, len(entries))
	var releases []db.Release
	var created, failed, redelivered int64
	for i, out := range outcomes {
		e := entries[i]
		if out.Conflict {
			if err := w.deadLetter(ctx, e, "order id held by another order", nil); err != nil {
				return err
			}
			continue
		}
		if out.Redelivered {
			redelivered++
		}
		switch {
		case out.Release != nil:
			// Also for a re-delivered failed order: the release may not have
			// happened before the crash that caused the re-delivery.
			releases = append(releases, *out.Release)
			if !out.Redelivered {
				failed++
				w.audit.Warn("order failed", orderFields(e, zap.String("reason", out.Reason))...)
			}
		case !out.Redelivered:
			created++
			w.audit.Info("order created", orderFields(e, zap.String("status", string(out.Status)))...)
		}
		ack = append(ack, e.StreamID)
	}
	if _, err := settle.Releases(ctx, w.redis, w.db, releases, time.Now()); err != nil {
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

// DeadLetter fails a well-formed order that cannot be persisted: it records
// it as failed in MySQL, gives its unit back and moves the entry to its
// partition's dead-letter stream, acknowledged; an order that turns out to
// be persisted already is only acknowledged. It makes one attempt: an error
// leaves the entry pending and nothing released. If MySQL refuses even the
// record of the failure (for the row's values, or while it takes other
// writes, such as a packet too large), the entry is dead-lettered
// with both reasons and its unit is NOT given back (no unit goes back for
// an order MySQL has not recorded): it stays held until an operator runs
// reconcile --repair. The reaper calls DeadLetter for entries delivered
// too often.
func (w *Worker) DeadLetter(ctx context.Context, e rdb.Entry, reason string) error {
	if e.Err != nil {
		return w.deadLetter(ctx, e, reason, nil)
	}
	status, rel, err := w.db.RecordFailed(ctx, e.Order, db.ReasonDeadLetter)
	if err != nil && !db.IsRowError(err) {
		// Not about the row: an outage, unless MySQL takes other writes.
		if perr := w.db.Writable(ctx, w.cfg.Consumer); perr != nil {
			return fmt.Errorf("record order %d failed: %w", e.Order.ID, err)
		}
	}
	switch {
	case err != nil:
		w.log.Error("mysql refuses to record the failed order; dead-lettered without giving its unit back",
			zap.Int64("order_id", e.Order.ID), zap.Error(err))
		return w.deadLetter(ctx, e, reason+"; failure not recorded: "+err.Error(), nil)
	case rel == nil:
		w.log.Info("dead-letter candidate is persisted already; acknowledged", zap.Int64("order_id", e.Order.ID), zap.String("status", string(status)))
		return w.redis.Ack(ctx, e.Partition, []string{e.StreamID})
	}
	return w.deadLetter(ctx, e, reason, rel)
}

// deadLetter gives back rel (when MySQL recorded one), then moves e to the
// dead-letter stream and acknowledges it.
func (w *Worker) deadLetter(ctx context.Context, e rdb.Entry, reason string, rel *db.Release) error {
	if rel != nil {
		if _, err := settle.Releases(ctx, w.redis, w.db, []db.Release{*rel}, time.Now()); err != nil {
			return err
		}
	}
	if err := w.redis.DeadLetter(ctx, e, reason); err != nil {
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
