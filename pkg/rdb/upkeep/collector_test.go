package upkeep_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/upkeep"
)

// Two workers acknowledge out of order (acknowledging deletes): Redis can
// no longer tell the group's lag, but the gauges stay right: length is the
// backlog, lag what no worker was given yet.
func TestStreamGaugesWhileWorkersAcknowledgeOutOfOrder(t *testing.T) {
	s := newStore(t, 1)
	ctx := context.Background()
	seedVoucher(t, s, rdb.Voucher{ID: 1, Stock: 100})
	for i := range 10 {
		_, err := claim(s, 1, "u"+strconv.Itoa(i), t0)
		require.NoError(t, err)
	}
	a, err := s.ReadGroup(ctx, 0, "a", ">", 5, 0)
	require.NoError(t, err)
	b, err := s.ReadGroup(ctx, 0, "b", ">", 5, 0)
	require.NoError(t, err)
	// b acknowledges its later entries; a still holds the earlier ones.
	require.NoError(t, s.Ack(ctx, 0, b))
	for i := range 3 {
		_, err := claim(s, 1, "late"+strconv.Itoa(i), t0)
		require.NoError(t, err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(upkeep.NewStreamCollector(s))
	gauge := func(name string) float64 {
		families, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range families {
			if f.GetName() == name {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatalf("no %s", name)
		return 0
	}
	require.Len(t, a, 5)
	require.EqualValues(t, 8, gauge("flashsale_stream_length"), "a's 5 and 3 new")
	require.EqualValues(t, 8, gauge("flashsale_stream_orders"), "one order each: every claim was a call of its own")
	require.EqualValues(t, 5, gauge("flashsale_stream_pending"))
	require.EqualValues(t, 3, gauge("flashsale_stream_lag"), "the 3 new ones, not yet delivered")
}

// Of several reapers, one exports the stream gauges at a time, so a sum
// over reapers counts each stream once; another takes over when its lease
// lapses.
func TestOneReaperExportsTheStreamGauges(t *testing.T) {
	s := newStore(t, 2)
	count := func(c *upkeep.StreamCollector) (lengths int, exporter float64) {
		reg := prometheus.NewRegistry()
		reg.MustRegister(c)
		families, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range families {
			switch f.GetName() {
			case "flashsale_stream_length":
				lengths = len(f.GetMetric())
			case "flashsale_stream_gauges_exporter":
				exporter = f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return lengths, exporter
	}
	a, b := upkeep.NewStreamCollector(s).ExportedBy("reaper-a"), upkeep.NewStreamCollector(s).ExportedBy("reaper-b")
	n, lead := count(a)
	require.Equal(t, 2, n, "one gauge per partition")
	require.EqualValues(t, 1, lead)
	n, lead = count(b)
	require.Zero(t, n)
	require.Zero(t, lead)
	n, _ = count(a)
	require.Equal(t, 2, n, "the lease is renewed at each scrape")

	require.NoError(t, s.Client().Del(context.Background(), "flashsale:gauges-exporter").Err()) // a's lease lapsed
	n, lead = count(b)
	require.Equal(t, 2, n)
	require.EqualValues(t, 1, lead)
}
