package persist

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashsale/flashsale/pkg/ops"
)

// Order outcomes, the "outcome" label of flashsale_worker_orders_total.
const (
	outcomeCreated      = "created"       // persisted (created, or completed), unit taken
	outcomeFailed       = "failed"        // persisted as failed, reservation released
	outcomeRedelivered  = "redelivered"   // persisted before: nothing written
	outcomeDeadLettered = "dead_lettered" // moved to the dead-letter stream
)

// ordersMetrics count what Orders persisted, in the worker or the reaper
// (their names are the worker's: dashboards and alerts read them).
type ordersMetrics struct {
	batches                                    prometheus.Counter
	orders                                     *prometheus.CounterVec
	batchSize                                  prometheus.Histogram
	commitSeconds                              prometheus.Histogram
	created, failed, redelivered, deadLettered prometheus.Counter
	// retries counts failed attempts at a batch; abandoned, the stream
	// entries left to the reaper after MaxAttempts while MySQL took writes.
	retries, abandoned prometheus.Counter
}

// Counts are the orders handled so far by outcome, and the batches.
func (o *Orders) Counts() map[string]int64 {
	m := o.metrics
	return map[string]int64{outcomeCreated: ops.CounterValue(m.created), outcomeFailed: ops.CounterValue(m.failed),
		outcomeRedelivered: ops.CounterValue(m.redelivered), outcomeDeadLettered: ops.CounterValue(m.deadLettered),
		"batches": ops.CounterValue(m.batches), "batch_retries": ops.CounterValue(m.retries)}
}

func newOrdersMetrics(reg prometheus.Registerer) *ordersMetrics {
	m := &ordersMetrics{
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flashsale_worker_batches_total", Help: "Batches persisted and acknowledged.",
		}),
		orders: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flashsale_worker_orders_total", Help: "Orders handled, by outcome.",
		}, []string{"outcome"}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "flashsale_worker_batch_size", Help: "Orders per transaction.", Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000},
		}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "flashsale_worker_commit_duration_seconds", Help: "Time to persist one batch in MySQL (one transaction).",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flashsale_worker_batch_retries_total", Help: "Failed attempts at a batch (each is retried; none fails an order).",
		}),
		abandoned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flashsale_worker_entries_abandoned_total", Help: "Entries left to the reaper after FLASHSALE_WORKER_MAX_ATTEMPTS while MySQL accepted writes.",
		}),
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	reg.MustRegister(m.batches, m.orders, m.batchSize, m.commitSeconds, m.retries, m.abandoned)
	m.created = m.orders.WithLabelValues(outcomeCreated)
	m.failed = m.orders.WithLabelValues(outcomeFailed)
	m.redelivered = m.orders.WithLabelValues(outcomeRedelivered)
	m.deadLettered = m.orders.WithLabelValues(outcomeDeadLettered)
	return m
}
