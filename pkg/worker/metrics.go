package worker

import "github.com/prometheus/client_golang/prometheus"

// metrics are the worker loop's own; the orders it persists are counted by
// persist.Orders (flashsale_worker_batches_total, ..._orders_total, ...).
type metrics struct {
	// retries counts failed attempts at a batch; abandoned counts entries
	// left to the reaper after MaxAttempts while MySQL accepted writes.
	retries, abandoned prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flashsale_worker_batch_retries_total", Help: "Failed attempts at a batch (each is retried; none fails an order).",
		}),
		abandoned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flashsale_worker_entries_abandoned_total", Help: "Entries left to the reaper after FLASHSALE_WORKER_MAX_ATTEMPTS while MySQL accepted writes.",
		}),
	}
	reg.MustRegister(m.retries, m.abandoned)
	return m
}
