package crowd_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/internal/testsink"
)

// chaosSale is the sale both chaos runs make: 20,000 users at 1,500
// claims/s for 3,000 units, 2 per user in claims of 1 or 2 (units, not
// orders, are conserved), half paid; beside it, a red envelope sale
// refunded at its end, a sale of codes, some cancelled unpaid and sold
// again, and a draw, drawn (and verified) while its reaper is killed.
// The payment window is 12 s: at 4 s, on two cores busy with a second
// copy of the suite, the workers' lag through the faults outlasted it and
// every payment came too late (0 paid of 2,308, 587 refused expired).
func chaosSale() harness.ChaosConfig {
	return harness.ChaosConfig{
		Users: 20000, Stock: 3000, PerUser: 2, Concurrency: 16, Rate: 1500,
		PaymentTimeout: 12 * time.Second, PayShare: 0.5, CancelShare: 0.1, TakeoverMinIdle: 1500 * time.Millisecond,
		MaxQuantity: 2, SideRate: 100, Envelopes: 2000, Codes: 400,
	}
}

// TestChaos sells under worker, reaper, mariadbd and redis-server kills,
// MySQL turning read-only and mariadbd freezing.
// CHAOS_DURATION lengthens the sale (make chaos); the default is the short
// run make test includes.
//
// The reapers relay the events to a webhook endpoint and a Kafka broker
// all along: every event reaches each at least once across the reaper's
// kills, duplicates the same bytes, the sequence without a gap, each
// order's events in order (the run's invariants).
func TestChaos(t *testing.T) {
	cfg := chaosSale()
	if !testing.Short() {
		cfg.Sinks = &harness.Sinks{Webhook: testsink.NewReceiver(t), Kafka: testsink.NewKafka(t, "flashsale.events")}
	}
	report := runChaos(t, cfg)
	require.Positive(t, report.Final["cancelled"], "some orders were never paid and were cancelled")
	f := report.Faults
	require.True(t, f.WorkerKills > 0 && f.WorkerStops > 0 && f.ReaperKills > 0 && f.MariaDBKills > 0 && f.RedisKills > 0 &&
		f.MySQLReadOnly > 0 && f.MariaDBPauses > 0, "%+v", f)
	require.Positive(t, f.MidBatch, "at least one worker died holding a batch")
	require.Positive(t, report.ReadOnlyRefusals, "the read-only spell refused the binaries' writes")
	require.Positive(t, report.ReaperTookOver, "the reaper took over what dead workers left")
	require.Positive(t, report.CancelledByBuyer, "buyers cancelled orders during the sale")
	for _, side := range report.Side {
		require.Positive(t, side.Live, "%s sale: %d claims, %d admitted, %d errors, %d unavailable, refused %v",
			side.Kind, side.Sale.Requests, side.Sale.Admitted, side.Sale.Errors, side.Sale.Unavailable, side.Sale.Rejected)
	}
	require.Positive(t, report.Side[0].Amounts.Refunded, "envelopes nobody grabbed were refunded")
	require.Positive(t, report.Side[1].Cancelled, "unpaid codes were cancelled")
	require.NotNil(t, report.Draw)
	require.Positive(t, report.Draw.Winners, "the draw beside the sale was drawn")
	require.Positive(t, report.Draw.ReaperKills, "the reaper was killed while the draw was due")
}

// The chaos run on a Redis Cluster of three masters with a replica each,
// the main voucher a hot one over three buckets: every fault of TestChaos,
// the Redis one a master killed and its replica promoted. What
// asynchronous replication lost is reported, not hidden; every other
// invariant holds, after reconcile --repair when the failover left Redis
// behind MySQL.
//
// It runs with FLASHSALE_REDIS_DURABILITY=replica: a 202 only once the
// killed master's replica had the admission, so the kill loses none
// (ReplicationLost 0 is among the invariants checked).
func TestChaosOnACluster(t *testing.T) {
	cfg := chaosSale()
	cfg.Cluster, cfg.StockBuckets, cfg.Durability = true, 3, "replica"
	report := runChaos(t, cfg)
	require.Positive(t, report.Faults.RedisKills, "a master was killed")
	require.Zero(t, report.ReplicationLost, "no 202 lost with the killed master")
}
