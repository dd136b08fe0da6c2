package event

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the events' metrics: the sequencer's and each sink's.
type Metrics struct {
	sequenced, deleted             prometheus.Counter
	unsequenced, oldestUnsequenced prometheus.Gauge
	delivered, givenUp             *prometheus.CounterVec // sink
	failures                       *prometheus.CounterVec // sink, cause
	undelivered, oldestAge         *prometheus.GaugeVec   // sink
}

// NewMetrics registers the events' metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	sink := []string{"sink"}
	m := &Metrics{
		sequenced: prometheus.NewCounter(prometheus.CounterOpts{Name: "flashsale_events_sequenced_total",
			Help: "Order events given their sequence (published to the events API)."}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{Name: "flashsale_events_deleted_total",
			Help: "Order events deleted past FLASHSALE_EVENTS_RETENTION."}),
		unsequenced: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flashsale_events_unsequenced",
			Help: "Order events committed and not yet given their sequence, at the sequencer's last round."}),
		oldestUnsequenced: prometheus.NewGauge(prometheus.GaugeOpts{Name: "flashsale_events_oldest_unsequenced_age_seconds",
			Help: "Age of the oldest order event not yet given its sequence, at the sequencer's last round (0: none)."}),
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flashsale_events_delivered_total",
			Help: "Order events delivered, by sink (kafka, webhook:URL); a redelivery counts again."}, sink),
		givenUp: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flashsale_events_failed_total",
			Help: "Order events a webhook endpoint did not take within FLASHSALE_EVENTS_WEBHOOK_RETRY_FOR, recorded failed, by sink."}, sink),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flashsale_events_delivery_failures_total",
			Help: "Failed attempts to deliver order events, by sink and cause (http_3xx, http_4xx, http_5xx, gone, timeout, refused, connection, kafka, other)."},
			[]string{"sink", "cause"}),
		undelivered: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "flashsale_events_undelivered",
			Help: "Order events sequenced and not yet delivered to the sink, as the reaper relaying it last saw (0 on the other reapers)."}, sink),
		oldestAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "flashsale_events_oldest_undelivered_age_seconds",
			Help: "Age of the oldest order event not yet delivered to the sink, as the reaper relaying it last saw (0: none, or another reaper relays it)."}, sink),
	}
	reg.MustRegister(m.sequenced, m.deleted, m.unsequenced, m.oldestUnsequenced, m.delivered, m.givenUp, m.failures, m.undelivered, m.oldestAge)
	return m
}
