package reaper

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashsale/flashsale/pkg/event"
)

type metrics struct {
	rounds                                                        *prometheus.CounterVec // service, outcome
	takenOver, deadLetters, cancelled, released, consumersRemoved prometheus.Counter
	refunded, drawn                                               prometheus.Counter
	drawSeconds, splitSeconds, splitPauseSeconds                  prometheus.Histogram
	storeDifferences, vouchersDiffering, lastCheck, hotVouchers   prometheus.Gauge
	bucketRate                                                    *prometheus.GaugeVec // voucher_id, bucket
	masterRate                                                    *prometheus.GaugeVec // master
	events                                                        *event.Metrics
}

func newMetrics(reg prometheus.Registerer) *metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	m := &metrics{
		rounds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "flashsale_reaper_passes_total",
			Help: "Passes run, by service (rescuer, consumers, expirer, releaser, refunder, drawer, mover, restorer, trimmer, checker, sequencer, detector, splitter) and outcome (ok, error)."}, []string{"service", "outcome"}),
		takenOver:        c("flashsale_reaper_claimed_total", "Stale pending entries taken over (XAUTOCLAIM) and processed."),
		deadLetters:      c("flashsale_reaper_dead_letters_total", "Entries dead-lettered for being delivered too often."),
		cancelled:        c("flashsale_reaper_cancelled_total", "Orders cancelled for not being paid in time."),
		released:         c("flashsale_reaper_stock_released_total", "Units given back to Redis (cancellations and failures)."),
		consumersRemoved: c("flashsale_reaper_consumers_removed_total", "Gone consumers removed from the group."),
		refunded:         c("flashsale_reaper_refunds_total", "Ended envelope sales whose ungrabbed amount was refunded to the sender."),
		drawn:            c("flashsale_reaper_draws_total", "Draw sales drawn (winners chosen, seed revealed)."),
		drawSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flashsale_reaper_draw_seconds",
			Help: "Time to draw one sale: keying its entries and making its winners' orders.", Buckets: prometheus.ExponentialBuckets(0.01, 4, 8)}),
		splitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flashsale_split_seconds",
			Help: "Time the splitter took to split one voucher's Redis buckets (split.Splitter.Split's steps), or to complete a split left half way.", Buckets: prometheus.ExponentialBuckets(0.005, 4, 8)}),
		splitPauseSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "flashsale_split_pause_seconds",
			Help: "Of a split, the time its moving buyers' claims waited: from the start of its freeze to the end of its switch.", Buckets: prometheus.ExponentialBuckets(0.005, 4, 8)}),
	}
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	m.storeDifferences = g("flashsale_reconcile_differences", "Values Redis holds that MySQL and the streams say it should not, over vouchers not admitting, at the last check.")
	m.vouchersDiffering = g("flashsale_reconcile_vouchers_differing", "Vouchers not admitting whose Redis state differs from MySQL's, at the last check.")
	m.lastCheck = g("flashsale_reconcile_last_check_timestamp_seconds", "When the checker last compared the stores.")
	m.hotVouchers = g("flashsale_hot_vouchers", "Vouchers marked hot (a Redis bucket at or above FLASHSALE_HOT_SPLIT_AT units admitted a second for FLASHSALE_HOT_SPLIT_FOR), at the detector's last round.")
	m.bucketRate = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "flashsale_bucket_admitted_units_per_second",
		Help: "Units each Redis bucket of a voucher on sale admitted a second between the detector's last two readings."}, []string{"voucher_id", "bucket"})
	m.masterRate = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "flashsale_master_admitted_units_per_second",
		Help: "Units the Redis buckets of vouchers on sale admitted a second, summed by the master deciding them (its address on a Redis Cluster, redis otherwise), between the detector's last two readings."}, []string{"master"})
	reg.MustRegister(m.hotVouchers, m.bucketRate, m.masterRate)
	reg.MustRegister(m.rounds, m.takenOver, m.deadLetters, m.cancelled, m.released, m.consumersRemoved, m.refunded, m.drawn, m.drawSeconds, m.splitSeconds, m.splitPauseSeconds,
		m.storeDifferences, m.vouchersDiffering, m.lastCheck)
	m.events = event.NewMetrics(reg)
	return m
}
