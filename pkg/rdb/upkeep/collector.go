package upkeep

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashsale/flashsale/pkg/rdb"
)

// StreamCollector reports every partition's stream at scrape time: its
// length (entries not yet persisted, one per 32 orders of an admission call), the orders
// they carry (the backlog to scale workers on), entries delivered but not
// yet acknowledged, the lag (entries not yet delivered) and the
// dead-letter stream's length (one entry per order).
//
// The lag is length minus pending, not the group's lag from XINFO GROUPS:
// acknowledged entries are deleted, and once two consumers acknowledge out
// of order Redis can no longer compute the group's lag (it reports none),
// exactly when the backlog is largest.
type StreamCollector struct {
	s                                  *rdb.Store
	length, orders, pending, lag, dead *prometheus.Desc
	up, exporting                      *prometheus.Desc
	// who, when set, makes the collector export the stream gauges only
	// while it holds the exporter lease (one reaper of several), so that
	// a sum over reapers counts each stream once.
	who string
}

// GaugeLease is how long the exporter of the stream gauges keeps the role
// without a scrape; another reaper takes over after it.
const GaugeLease = 30 * time.Second

// ExportedBy makes c export the stream gauges only while who holds the
// exporter lease (renewed at each scrape), so that several reapers do not
// each export them.
func (c *StreamCollector) ExportedBy(who string) *StreamCollector {
	c.who = who
	return c
}

// leading reports whether this collector holds the exporter lease, taking
// it when nobody does and renewing it when it does.
func (c *StreamCollector) leading(ctx context.Context) (bool, error) {
	if c.who == "" {
		return true, nil
	}
	return c.s.HoldGaugesLease(ctx, c.who, GaugeLease)
}

// NewStreamCollector returns a collector over s's partitions.
func NewStreamCollector(s *rdb.Store) *StreamCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, []string{"partition"}, nil)
	}
	return &StreamCollector{s: s,
		length:  d("flashsale_stream_length", "Entries in the order stream (one per 32 orders of an admission call): admitted, not yet persisted."),
		orders:  d("flashsale_stream_orders", "Orders in the order stream's entries: admitted, not yet persisted."),
		pending: d("flashsale_stream_pending", "Entries delivered to a consumer and not yet acknowledged."),
		lag:     d("flashsale_stream_lag", "Entries not yet delivered to the consumer group."),
		dead:    d("flashsale_stream_dead_letters", "Orders in the partition's dead-letter stream."),
		up:      prometheus.NewDesc("flashsale_stream_scrape_ok", "1 if the streams could be read at this scrape.", nil, nil),
		exporting: prometheus.NewDesc("flashsale_stream_gauges_exporter",
			"1 if this process exports the stream gauges (one reaper of several does, so a sum counts each stream once).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *StreamCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.length
	ch <- c.orders
	ch <- c.pending
	ch <- c.lag
	ch <- c.dead
	ch <- c.up
	ch <- c.exporting
}

// Collect implements prometheus.Collector.
func (c *StreamCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ok := 1.0
	lead, err := c.leading(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	if !lead {
		ch <- prometheus.MustNewConstMetric(c.exporting, prometheus.GaugeValue, 0)
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.exporting, prometheus.GaugeValue, 1)
	for p := range c.s.Partitions() {
		b, err := c.s.PartitionBacklog(ctx, p)
		if err != nil {
			ok = 0
			continue
		}
		label := strconv.Itoa(p)
		ch <- prometheus.MustNewConstMetric(c.length, prometheus.GaugeValue, float64(b.Length), label)
		ch <- prometheus.MustNewConstMetric(c.orders, prometheus.GaugeValue, float64(b.Orders), label)
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(b.Pending), label)
		ch <- prometheus.MustNewConstMetric(c.dead, prometheus.GaugeValue, float64(b.DeadLetters), label)
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(max(0, b.Length-b.Pending)), label)
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, ok)
}
