package persist

// What happens when a batch fails, in one place. Each policy is a layer:
// it wraps a step (what is done to a batch of orders of one partition),
// adds one thing, and reads alone. NewOrders composes them (layers):
//
//	persist = recovered(attempt)
//	handle  = leased(acked(persist))          the reaper's one attempt (Handle)
//	process = leased(retried(acked(persist))) the worker's batch (Process)
//
// The policies, in the order a failing batch meets them:
//
//  1. The lease (leased): while a batch is in hand its entries' idle time
//     is renewed every third of FLASHSALE_TAKEOVER_MIN_IDLE, so the reaper
//     never takes over the entries of a live consumer.
//  2. Retry (retried): a failed attempt is tried again with backoff; no
//     order is failed for it.
//  3. An outage waits (retried): after FLASHSALE_WORKER_MAX_ATTEMPTS the
//     worker asks MySQL whether it takes writes at all; while it does
//     not, the batch waits, neither failed nor released, however long.
//  4. The last try, order by order (retried's lastTry): MySQL takes
//     writes and the batch still fails; each order is tried alone, the
//     stream entries whose orders all succeed are acknowledged, and an
//     entry with an order that fails alone is left unacknowledged without
//     a lease: the reaper takes it over and counts its deliveries.
//  5. Rows refused (oneByOne, within an attempt): a batch MySQL refuses
//     for the values of its rows is persisted order by order, and an
//     order refused on its own is dead-lettered; every order refused the
//     same way is the store's fault, an outage, and fails nothing.
//  6. A panic (recovered): a bug is recovered, the batch is tried order
//     by order, and only an order that panics on its own is
//     dead-lettered.
//  7. Dead letters (DeadLetter): an order that cannot be persisted is
//     recorded failed in MySQL, its units given back, and copied to its
//     partition's dead-letter stream.
//
// The acknowledgement (acked) follows a step that succeeded: its stream
// entries' orders are all done. The reaper dead-letters (7) an entry
// delivered FLASHSALE_MAX_DELIVERIES times.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/backoff"
	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/ops"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/settle"
)

// A step does something to a batch of orders of one partition.
type step func(ctx context.Context, orders []rdb.StreamOrder) error

// layers composes the policies, each a layer around the one within.
func (w *Orders) layers() {
	attempt := func(ctx context.Context, orders []rdb.StreamOrder) error { return w.attempt(ctx, orders) }
	w.persist = w.recovered(attempt)
	w.handle = w.leased(w.acked(w.persist))
	w.process = w.leased(w.retried(w.acked(w.persist)))
}

// Process persists a batch a consumer read (process): until every stream
// entry is acknowledged or left to the reaper, or ctx ends.
func (w *Orders) Process(ctx context.Context, orders []rdb.StreamOrder) {
	if len(orders) > 0 {
		_ = w.process(ctx, orders)
	}
}

// Handle makes one attempt at the orders of some stream entries of one
// partition (every order of each of those stream entries), holding their
// lease meanwhile, and acknowledges the stream entries once every order
// they carry is done: persisted (created, or recorded failed) or
// dead-lettered. An error leaves them unacknowledged, to be tried again;
// orders done before it stay done (a retry finds them persisted). The
// reaper calls it for the stream entries it takes over.
func (w *Orders) Handle(ctx context.Context, orders []rdb.StreamOrder) error {
	if len(orders) == 0 {
		return nil
	}
	return w.handle(ctx, orders)
}

// leased holds the lease of the orders' stream entries while next runs
// (1).
func (w *Orders) leased(next step) step {
	return func(ctx context.Context, orders []rdb.StreamOrder) error {
		defer w.HoldLease(ctx, orders)()
		return next(ctx, orders)
	}
}

// HoldLease renews this consumer's hold on the stream entries of orders
// every third of TakeoverMinIdle until the returned stop is called.
func (w *Orders) HoldLease(ctx context.Context, orders []rdb.StreamOrder) (stop func()) {
	ids := rdb.StreamIDs(orders)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(w.cfg.TakeoverMinIdle / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if _, err := w.redis.RenewLease(ctx, orders[0].Partition, w.cfg.Consumer, ids); err != nil && ctx.Err() == nil {
					w.log.Warn("renew lease failed", zap.Error(err))
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// Persist persists orders without acknowledging them (persist): every
// one of them is persisted, failed or dead-lettered when it returns nil.
// The caller, holding their lease, acknowledges their stream entries
// (Ack) once all their orders are done.
func (w *Orders) Persist(ctx context.Context, orders []rdb.StreamOrder) error {
	return w.persist(ctx, orders)
}

// acked acknowledges the orders' stream entries once next succeeded:
// every order they carry is done.
func (w *Orders) acked(next step) step {
	return func(ctx context.Context, orders []rdb.StreamOrder) error {
		if err := next(ctx, orders); err != nil {
			return err
		}
		return w.Ack(ctx, orders)
	}
}

// retried runs next until it succeeds or ctx ends: a failure is retried
// with backoff (2); after MaxAttempts failures, a MySQL that takes no
// writes is waited for (3), and one that does gets the batch order by
// order (4): that last try is persist's and Ack's, order by order, not
// next's. It returns nil: what is not done is left to the reaper.
func (w *Orders) retried(next step) step {
	return func(ctx context.Context, orders []rdb.StreamOrder) error {
		bo := backoff.New(w.cfg.RetryBackoff, backoff.MaxDefault)
		for attempt := 1; ; attempt++ {
			err := next(ctx, orders)
			if err == nil || ctx.Err() != nil {
				return nil
			}
			w.metrics.retries.Inc()
			log := w.log.With(append(ops.TraceFields(ctx), zap.Int("partition", orders[0].Partition), zap.Int("batch_size", len(orders)), zap.Int("attempt", attempt))...)
			if attempt >= w.cfg.MaxAttempts {
				if perr := w.db.Writable(ctx, w.cfg.Consumer); perr == nil {
					log.Error("batch keeps failing while mysql accepts writes; trying entry by entry", zap.Error(err))
					w.lastTry(ctx, orders)
					return nil
				} else if attempt == w.cfg.MaxAttempts || attempt%10 == 0 {
					log.Warn("mysql does not accept writes; the batch waits", zap.Error(err), zap.NamedError("probe", perr))
				}
			} else if attempt == 1 || attempt%10 == 0 {
				log.Warn("batch failed; retrying", zap.Error(err), zap.String("class", db.Classify(err).String()))
			}
			if bo.Wait(ctx) != nil {
				return nil
			}
		}
	}
}

// lastTry tries each order of a batch that cannot succeed as a whole
// once on its own, and acknowledges the stream entries whose orders all
// succeeded (4). A stream entry with an order that still fails is left
// unacknowledged without a lease, so the reaper takes it over and counts
// its deliveries (its orders persisted here are found persisted then).
func (w *Orders) lastTry(ctx context.Context, orders []rdb.StreamOrder) {
	failed := map[string]bool{}
	for _, e := range orders {
		if err := w.persist(ctx, []rdb.StreamOrder{e}); err != nil {
			failed[e.StreamID] = true
			w.metrics.abandoned.Inc()
			w.log.Error("order cannot be persisted; its stream entry is left to the reaper", zap.Int("partition", e.Partition),
				zap.String("stream_id", e.StreamID), zap.Int64("order_id", e.Order.ID), zap.Error(err))
		}
	}
	done := slices.DeleteFunc(slices.Clone(orders), func(e rdb.StreamOrder) bool { return failed[e.StreamID] })
	if err := w.Ack(ctx, done); err != nil {
		w.log.Error("acknowledging the persisted entries failed; they are left to the reaper", zap.Error(err))
	}
}

// recovered runs next, and recovers a panic (a bug) in it (6): the batch
// is then run order by order, and only an order that panics on its own
// is dead-lettered. When it returns nil every one of orders is
// persisted, failed or dead-lettered.
func (w *Orders) recovered(next step) step {
	return func(ctx context.Context, orders []rdb.StreamOrder) error {
		if len(orders) == 0 {
			return nil
		}
		panicked, err := guard(func() error { return next(ctx, orders) })
		if panicked == nil {
			return err
		}
		w.log.Error("panic while handling a batch; retrying order by order", zap.Any("panic", panicked), zap.Stack("stack"))
		for _, e := range orders {
			panicked, err := guard(func() error { return next(ctx, []rdb.StreamOrder{e}) })
			if panicked != nil {
				err = w.DeadLetter(ctx, e, fmt.Sprintf("panic: %v", panicked))
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
}

// guard runs f and turns a panic into a value.
func guard(f func() error) (panicked any, err error) {
	defer func() { panicked = recover() }()
	return nil, f()
}

// oneByOne persists a batch MySQL refused for the values of its rows
// one order at a time, and fails (dead-letters) the orders refused on their
// own. If every order of a batch of several is refused with the same error,
// no row is at fault but the store (a column shortened, a CHECK added): that
// is an outage, and nothing is failed.
func (w *Orders) oneByOne(ctx context.Context, orders []rdb.StreamOrder, batchErr error) error {
	w.log.Warn("batch refused for its values; trying order by order", zap.Int("partition", orders[0].Partition),
		zap.Int("batch_size", len(orders)), zap.Error(batchErr))
	outs := make([][]db.Outcome, len(orders))
	errs := make([]error, len(orders))
	refused, same := 0, true
	knew := time.Now() // before any release these writes return was read
	for i, e := range orders {
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
	if len(orders) > 1 && refused == len(orders) && same {
		return fmt.Errorf("every order of the batch refused the same way, taken as an outage: %w", errs[0])
	}
	for i, e := range orders {
		var err error
		if errs[i] != nil {
			err = w.DeadLetter(ctx, e, "rejected by mysql: "+errs[i].Error())
		} else {
			err = w.record(ctx, []rdb.StreamOrder{e}, outs[i], knew)
		}
		if err != nil {
			return err
		}
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
		return w.deadLetter(ctx, e, reason, nil, time.Time{})
	}
	knew := time.Now()
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
		return w.deadLetter(ctx, e, reason+"; failure not recorded: "+err.Error(), nil, knew)
	case rel == nil:
		w.log.Info("dead-letter candidate is persisted already", zap.Int64("order_id", e.Order.ID), zap.String("status", string(status)))
		return nil
	}
	return w.deadLetter(ctx, e, reason, rel, knew)
}

// deadLetter gives back rel (when MySQL recorded one), then copies e to the
// dead-letter stream.
func (w *Orders) deadLetter(ctx context.Context, e rdb.StreamOrder, reason string, rel *db.Release, knew time.Time) error {
	if rel != nil {
		if _, err := settle.Releases(ctx, w.redis, w.db, []db.Release{*rel}, knew, time.Now()); err != nil {
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
