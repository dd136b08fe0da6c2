// Package persist persists admitted orders: the batch engine the workers
// and the reaper share, from a batch of stream entries to MySQL rows, the
// units of failed orders given back (through pkg/settle) and the entries
// acknowledged, with its configuration and metrics.
package persist

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/settle"
)

// Orders persists admitted orders from their stream entries into MySQL and
// acknowledges them in Redis, giving back the units of those MySQL fails:
// the worker's loop and the reaper (the entries it takes over, the dead
// letters it requeues) both process entries through it, with the same
// code and metrics.
type Orders struct {
	cfg     Config
	redis   *rdb.Store
	db      *db.Store
	log     *zap.Logger
	audit   *zap.Logger
	metrics *ordersMetrics
}

// NewOrders returns an Orders for consumer cfg.Consumer (which must be
// set), logging to log, writing the per-order audit lines to audit (nil:
// none) and registering its metrics with reg.
func NewOrders(cfg Config, r *rdb.Store, d *db.Store, log, audit *zap.Logger, reg prometheus.Registerer) *Orders {
	if log == nil {
		log = zap.NewNop()
	}
	if audit == nil {
		audit = zap.NewNop()
	}
	return &Orders{cfg: cfg, redis: r, db: d, log: log, audit: audit.With(zap.String("consumer", cfg.Consumer)), metrics: newOrdersMetrics(reg)}
}

// Handle makes one attempt at the orders of some stream entries of one
// partition (every order of each of those stream entries), holding their
// lease meanwhile, and acknowledges the stream entries once every order
// they carry is done: persisted (created, or recorded failed) or
// dead-lettered. An error leaves them pending, to be tried again; orders
// done before it stay done (a retry finds them persisted).
// Malformed orders go to the dead-letter stream; orders MySQL refuses for
// want of stock or by the per-user limit are recorded failed and their
// units given back; a batch MySQL refuses for the values of its rows is
// tried order by order (see handleOneByOne), so one bad order never takes
// its stream entry's other orders with it. The reaper calls Handle for the
// stream entries it claims.
// A panic (a bug) is recovered: the batch is retried order by order and
// only an order that panics on its own is dead-lettered.
func (w *Orders) Handle(ctx context.Context, entries []rdb.StreamOrder) error {
	if len(entries) == 0 {
		return nil
	}
	defer w.HoldLease(ctx, entries)()
	return w.Try(ctx, entries)
}

// Try is Handle without the lease (for a caller that holds it).
func (w *Orders) Try(ctx context.Context, entries []rdb.StreamOrder) error {
	if err := w.Persist(ctx, entries); err != nil {
		return err
	}
	return w.Ack(ctx, entries)
}

// Persist is Try without the acknowledgement: every order of entries is
// persisted, failed or dead-lettered when it returns nil. The caller
// acknowledges their stream entries (Ack) once all their orders are
// done.
func (w *Orders) Persist(ctx context.Context, entries []rdb.StreamOrder) error {
	if len(entries) == 0 {
		return nil
	}
	panicked, err := guard(func() error { return w.persistOnce(ctx, entries) })
	if panicked == nil {
		return err
	}
	w.log.Error("panic while handling a batch; retrying order by order", zap.Any("panic", panicked), zap.Stack("stack"))
	for _, e := range entries {
		panicked, err := guard(func() error { return w.persistOnce(ctx, []rdb.StreamOrder{e}) })
		if panicked != nil {
			err = w.DeadLetter(ctx, e, fmt.Sprintf("panic: %v", panicked))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Ack acknowledges the stream entries of entries (of one partition), whose
// orders are all done, and counts the batch.
func (w *Orders) Ack(ctx context.Context, entries []rdb.StreamOrder) error {
	if len(entries) == 0 {
		return nil
	}
	if err := w.redis.Ack(ctx, entries[0].Partition, entries); err != nil {
		return err
	}
	w.metrics.batches.Inc()
	return nil
}

// guard runs f and turns a panic into a value.
func guard(f func() error) (panicked any, err error) {
	defer func() { panicked = recover() }()
	return nil, f()
}

func (w *Orders) persistOnce(ctx context.Context, entries []rdb.StreamOrder) error {
	valid := make([]rdb.StreamOrder, 0, len(entries))
	for _, e := range entries {
		if e.Err != nil {
			if err := w.deadLetter(ctx, e, "malformed: "+e.Err.Error(), nil); err != nil {
				return err
			}
			continue
		}
		valid = append(valid, e)
	}
	// A read holds whole stream entries, so it may hold more orders than
	// a transaction takes: BatchSize orders a transaction.
	for len(valid) > 0 {
		n := len(valid)
		if w.cfg.BatchSize > 0 {
			n = min(n, w.cfg.BatchSize)
		}
		if err := w.persist(ctx, valid[:n]); err != nil {
			return err
		}
		valid = valid[n:]
	}
	return nil
}

// persist writes valid orders in one transaction and records what became
// of each.
func (w *Orders) persist(ctx context.Context, valid []rdb.StreamOrder) error {
	t0 := time.Now()
	outcomes, err := w.db.PersistBatch(ctx, ordersOf(valid))
	w.metrics.commitSeconds.Observe(time.Since(t0).Seconds())
	w.metrics.batchSize.Observe(float64(len(valid)))
	switch {
	case err == nil:
		return w.record(ctx, valid, outcomes)
	case db.IsRowError(err):
		return w.handleOneByOne(ctx, valid, err)
	default:
		return fmt.Errorf("persist batch of %d: %w", len(valid), err)
	}
}

func ordersOf(entries []rdb.StreamOrder) []order.Order {
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
func (w *Orders) handleOneByOne(ctx context.Context, entries []rdb.StreamOrder, batchErr error) error {
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
			err = w.record(ctx, []rdb.StreamOrder{e}, outs[i])
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// HoldLease renews this consumer's hold on the stream entries of entries
// every third of ClaimMinIdle until the returned stop is called.
func (w *Orders) HoldLease(ctx context.Context, entries []rdb.StreamOrder) (stop func()) {
	ids := rdb.StreamIDs(entries)
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

// record gives back the units of the orders MySQL recorded failed, and
// dead-letters the orders whose id MySQL holds for another order.
func (w *Orders) record(ctx context.Context, entries []rdb.StreamOrder, outcomes []db.Outcome) error {
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
	}
	if _, err := settle.Releases(ctx, w.redis, w.db, releases, time.Now()); err != nil {
		return err
	}
	w.metrics.created.Add(float64(created))
	w.metrics.failed.Add(float64(failed))
	w.metrics.redelivered.Add(float64(redelivered))
	if ce := w.log.Check(zap.DebugLevel, "batch persisted"); ce != nil {
		ce.Write(zap.Int("partition", entries[0].Partition), zap.Int("batch_size", len(entries)), zap.Int64("created", created), zap.Int64("failed", failed))
	}
	return nil
}

// DeadLetter fails a well-formed order that cannot be persisted: it records
// it as failed in MySQL, gives its unit back and copies the order to its
// partition's dead-letter stream; an order that turns out to be persisted
// already is left as it is. The caller acknowledges its stream entry
// (Ack). It makes one attempt: an error leaves the order not done and
// nothing released. If MySQL refuses even the
// record of the failure (for the row's values, or while it takes other
// writes, such as a packet too large), the entry is dead-lettered
// with both reasons and its unit is NOT given back (no unit goes back for
// an order MySQL has not recorded): it stays held until an operator runs
// reconcile --repair. The reaper calls DeadLetter for entries delivered
// too often.
func (w *Orders) DeadLetter(ctx context.Context, e rdb.StreamOrder, reason string) error {
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
		w.log.Info("dead-letter candidate is persisted already", zap.Int64("order_id", e.Order.ID), zap.String("status", string(status)))
		return nil
	}
	return w.deadLetter(ctx, e, reason, rel)
}

// deadLetter gives back rel (when MySQL recorded one), then copies e to the
// dead-letter stream.
func (w *Orders) deadLetter(ctx context.Context, e rdb.StreamOrder, reason string, rel *db.Release) error {
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
func orderFields(e rdb.StreamOrder, more ...zap.Field) []zap.Field {
	return append([]zap.Field{zap.Int64("order_id", e.Order.ID), zap.Int64("voucher_id", e.Order.VoucherID),
		zap.String("user_id", e.Order.UserID), zap.Int("partition", e.Partition)}, more...)
}
