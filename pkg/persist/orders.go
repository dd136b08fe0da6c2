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
	// attempt is one attempt at orders, persistOnce; a test
	// replaces it to make one panic.
	attempt func(ctx context.Context, orders []rdb.StreamOrder) error
	// The policies composed around attempt (policy.go, layers).
	persist, handle, process step
}

// NewOrders returns an Orders for consumer cfg.Consumer (which must be
// set; the zero fields take their defaults), logging to log, writing the
// per-order audit lines to audit (nil: none) and registering its metrics
// with reg (nil: a registry of its own).
func NewOrders(cfg Config, r *rdb.Store, d *db.Store, log, audit *zap.Logger, reg prometheus.Registerer) *Orders {
	cfg.SetDefaults()
	if log == nil {
		log = zap.NewNop()
	}
	if audit == nil {
		audit = zap.NewNop()
	}
	o := &Orders{cfg: cfg, redis: r, db: d, log: log, audit: audit.With(zap.String("consumer", cfg.Consumer)), metrics: newOrdersMetrics(reg)}
	o.attempt = o.persistOnce
	o.layers()
	return o
}

// Ack acknowledges the stream entries of orders (of one partition), whose
// orders are all done, and counts the batch.
func (w *Orders) Ack(ctx context.Context, orders []rdb.StreamOrder) error {
	if len(orders) == 0 {
		return nil
	}
	if err := w.redis.Ack(ctx, orders[0].Partition, orders); err != nil {
		return err
	}
	w.metrics.batches.Inc()
	return nil
}

func (w *Orders) persistOnce(ctx context.Context, orders []rdb.StreamOrder) error {
	valid := make([]rdb.StreamOrder, 0, len(orders))
	for _, e := range orders {
		if e.Err != nil {
			if err := w.deadLetter(ctx, e, "malformed: "+e.Err.Error(), nil, time.Time{}); err != nil {
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
		if err := w.commit(ctx, valid[:n]); err != nil {
			return err
		}
		valid = valid[n:]
	}
	return nil
}

// commit writes valid orders in one transaction and records what became
// of each.
func (w *Orders) commit(ctx context.Context, valid []rdb.StreamOrder) error {
	t0 := time.Now()
	outcomes, err := w.db.PersistBatch(ctx, ordersOf(valid))
	w.metrics.commitSeconds.Observe(time.Since(t0).Seconds())
	w.metrics.batchSize.Observe(float64(len(valid)))
	switch {
	case err == nil:
		return w.record(ctx, valid, outcomes, t0)
	case db.IsRowError(err):
		return w.oneByOne(ctx, valid, err)
	default:
		return fmt.Errorf("persist batch of %d: %w", len(valid), err)
	}
}

func ordersOf(batch []rdb.StreamOrder) []order.Order {
	orders := make([]order.Order, len(batch))
	for i, e := range batch {
		orders[i] = e.Order
	}
	return orders
}

// record gives back the units of the orders MySQL recorded failed, and
// dead-letters the orders whose id MySQL holds for another order.
func (w *Orders) record(ctx context.Context, orders []rdb.StreamOrder, outcomes []db.Outcome, knew time.Time) error {
	var releases []db.Release
	var created, failed, redelivered int64
	for i, out := range outcomes {
		e := orders[i]
		if out.Conflict {
			if err := w.deadLetter(ctx, e, "order id held by another order", nil, time.Time{}); err != nil {
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
	if _, err := settle.Releases(ctx, w.redis, w.db, releases, knew, time.Now()); err != nil {
		return err
	}
	w.metrics.created.Add(float64(created))
	w.metrics.failed.Add(float64(failed))
	w.metrics.redelivered.Add(float64(redelivered))
	if ce := w.log.Check(zap.DebugLevel, "batch persisted"); ce != nil {
		ce.Write(zap.Int("partition", orders[0].Partition), zap.Int("batch_size", len(orders)), zap.Int64("created", created), zap.Int64("failed", failed))
	}
	return nil
}

// orderFields are the fields of an order's audit line.
func orderFields(e rdb.StreamOrder, more ...zap.Field) []zap.Field {
	return append([]zap.Field{zap.Int64("order_id", e.Order.ID), zap.Int64("voucher_id", e.Order.VoucherID),
		zap.String("user_id", e.Order.UserID), zap.Int("partition", e.Partition)}, more...)
}
