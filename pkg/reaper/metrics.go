package reaper

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	rounds                                                        *prometheus.CounterVec // service, outcome
	takenOver, deadLetters, cancelled, released, consumersRemoved prometheus.Counter
	refunded, drawn, eventsSequenced, eventsDeleted               prometheus.Counter
	eventsUnsequenced, eventsOldestAge                            prometheus.Gauge
	drawSeconds                                                   prometheus.Histogram
	storeDifferences, vouchersDiffering, lastCheck                prometheus.Gauge
	// Per sink of the order events (the relay).
	sinkDelivered, sinkGivenUp     *prometheus.CounterVec // sink
	sinkFailures                   *prometheus.CounterVec // sink, cause
	sinkUndelivered, sinkOldestAge *prometheus.GaugeVec   // sink
}

func newMetrics(reg prometheus.Registerer) *metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := &metrics{
		rounds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flashsale_reaper_passes_total",
			Help: "Passes run, by service (rescuer, consumers, expirer, releaser, refunder, drawer, mover, restorer, checker, sequencer) and outcome (ok, error)."}, []string{"service", "outcome"}),
		takenOver:        c("flashsale_reaper_claimed_total", "Stale pending entries taken over (XAUTOCLAIM) and processed."),
		deadLetters:      c("flashsale_reaper_dead_letters_total", "Entries dead-lettered for being delivered too often."),
		cancelled:        c("flashsale_reaper_cancelled_total", "Orders cancelled for not being paid in time."),
		released:         c("flashsale_reaper_stock_released_total", "Units given back to Redis (cancellations and failures)."),
		consumersRemoved: c("flashsale_reaper_consumers_removed_total", "Gone consumers removed from the group."),
		refunded:         c("flashsale_reaper_refunds_total", "Ended envelope sales whose ungrabbed amount was refunded to the sender."),
		drawn:            c("flashsale_reaper_draws_total", "Draw sales drawn (winners chosen, seed revealed)."),
		eventsSequenced:  c("flashsale_events_sequenced_total", "Order events given their sequence (published to the events API)."),
		eventsDeleted:    c("flashsale_events_deleted_total", "Order events deleted past FLASHSALE_EVENTS_RETENTION."),
		drawSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flashsale_reaper_draw_seconds",
			Help: "Time to draw one sale: keying its entries and making its winners' orders.", Buckets: prometheus.ExponentialBuckets(0.01, 4, 8)}),
	}
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	m.storeDifferences = g("flashsale_reconcile_differences", "Values Redis holds that MySQL and the streams say it should not, over vouchers not admitting, at the last check.")
	m.vouchersDiffering = g("flashsale_reconcile_vouchers_differing", "Vouchers not admitting whose Redis state differs from MySQL's, at the last check.")
	m.eventsUnsequenced = g("flashsale_events_unsequenced", "Order events committed and not yet given their sequence, at the sequencer's last round.")
	m.eventsOldestAge = g("flashsale_events_oldest_unsequenced_age_seconds", "Age of the oldest order event not yet given its sequence, at the sequencer's last round (0: none).")
	sink := []string{"sink"}
	m.sinkDelivered = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flashsale_events_delivered_total",
		Help: "Order events delivered, by sink (kafka, webhook:URL); a redelivery counts again."}, sink)
	m.sinkGivenUp = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flashsale_events_failed_total",
		Help: "Order events a webhook endpoint did not take within FLASHSALE_EVENTS_WEBHOOK_RETRY_FOR, recorded failed, by sink."}, sink)
	m.sinkFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flashsale_events_delivery_failures_total",
		Help: "Failed attempts to deliver order events, by sink and cause (http_3xx, http_4xx, http_5xx, gone, timeout, refused, connection, kafka, other)."},
		[]string{"sink", "cause"})
	m.sinkUndelivered = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "flashsale_events_undelivered",
		Help: "Order events sequenced and not yet delivered to the sink, as the reaper relaying it last saw (0 on the other reapers)."}, sink)
	m.sinkOldestAge = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "flashsale_events_oldest_undelivered_age_seconds",
		Help: "Age of the oldest order event not yet delivered to the sink, as the reaper relaying it last saw (0: none, or another reaper relays it)."}, sink)
	m.lastCheck = g("flashsale_reconcile_last_check_timestamp_seconds", "When the checker last compared the stores.")
	reg.MustRegister(m.rounds, m.takenOver, m.deadLetters, m.cancelled, m.released, m.consumersRemoved, m.refunded, m.drawn, m.drawSeconds,
		m.storeDifferences, m.vouchersDiffering, m.lastCheck, m.eventsSequenced, m.eventsDeleted, m.eventsUnsequenced, m.eventsOldestAge,
		m.sinkDelivered, m.sinkGivenUp, m.sinkFailures, m.sinkUndelivered, m.sinkOldestAge)
	return m
}
