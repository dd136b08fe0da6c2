package reaper

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	passes                                                      *prometheus.CounterVec // service, outcome
	claimed, deadLetters, cancelled, released, consumersRemoved prometheus.Counter
	refunded                                                    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := &metrics{
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flashsale_reaper_passes_total",
			Help: "Passes run, by service (rescuer, consumers, expirer, releaser, refunder) and outcome (ok, error)."}, []string{"service", "outcome"}),
		claimed:          c("flashsale_reaper_claimed_total", "Stale pending entries taken over (XAUTOCLAIM) and processed."),
		deadLetters:      c("flashsale_reaper_dead_letters_total", "Entries dead-lettered for being delivered too often."),
		cancelled:        c("flashsale_reaper_cancelled_total", "Orders cancelled for not being paid in time."),
		released:         c("flashsale_reaper_stock_released_total", "Units given back to Redis (cancellations and failures)."),
		consumersRemoved: c("flashsale_reaper_consumers_removed_total", "Gone consumers removed from the group."),
		refunded:         c("flashsale_reaper_refunds_total", "Ended envelope sales whose ungrabbed amount was refunded to the sender."),
	}
	reg.MustRegister(m.passes, m.claimed, m.deadLetters, m.cancelled, m.released, m.consumersRemoved, m.refunded)
	return m
}
