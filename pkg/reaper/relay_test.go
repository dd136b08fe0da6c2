package reaper_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/event"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testsink"
	"github.com/flashsale/flashsale/pkg/internal/wait"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/reaper"
	"github.com/flashsale/flashsale/pkg/worker"
)

// changeOrders persists n orders of a fresh voucher (from user number
// from), pays every third and cancels every third but one: events of
// created, paid and cancelled orders, several for most orders.
func changeOrders(t *testing.T, e *testenv.Env, v db.Voucher, from, n int) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	os := make([]order.Order, n)
	for i := range os {
		os[i] = order.Order{ID: int64(5_000_000 + from + i), VoucherID: v.ID, UserID: fmt.Sprintf("ev%d", from+i), CreatedAt: now, Day: order.Day(now, time.UTC)}
	}
	_, err := e.DB.PersistBatch(ctx, os)
	require.NoError(t, err)
	for i, o := range os {
		switch i % 3 {
		case 0:
			_, err = e.DB.PayOrder(ctx, o.ID, o.UserID, now)
		case 1:
			_, _, err = e.DB.CancelOrder(ctx, o.ID, o.UserID, now)
		}
		require.NoError(t, err)
	}
}

// relaying runs a reaper with the sinks cfg sets until the test ends.
func relaying(t *testing.T, e *testenv.Env, name string, events event.Config) (*reaper.Reaper, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := reaper.Config{Config: worker.Config{Consumer: name, TakeoverMinIdle: time.Second, Block: time.Millisecond},
		ConsumerGoneAfter: time.Hour, Interval: time.Hour, EventsInterval: 20 * time.Millisecond, EventsConfig: events}
	r, err := reaper.New(cfg, e.RDB, e.DB, zaptest.NewLogger(t), reaper.WithRegistry(reg))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return r, reg
}

// sequenced is every event of the outbox, once all are sequenced.
func sequenced(t *testing.T, e *testenv.Env) []db.OutboxEvent {
	t.Helper()
	var events []db.OutboxEvent
	testenv.Eventually(t, 30*time.Second, "every event sequenced", func() bool {
		n, _, err := e.DB.EventBacklog(context.Background())
		if err != nil || n > 0 {
			return false
		}
		last, err := e.DB.LastSequence(context.Background())
		require.NoError(t, err)
		events, err = e.DB.Events(context.Background(), 0, int(last)+1)
		require.NoError(t, err)
		return true
	})
	return events
}

// received waits until got holds every event of want, then checks it.
func received(t *testing.T, what string, want []db.OutboxEvent, got func() []testsink.Delivery) []testsink.Delivery {
	t.Helper()
	return receivedBy(t, what, want, got, testsink.Check)
}

func receivedBy(t *testing.T, what string, want []db.OutboxEvent, got func() []testsink.Delivery, check func([]db.OutboxEvent, []testsink.Delivery) []string) []testsink.Delivery {
	t.Helper()
	var ds []testsink.Delivery
	require.NoError(t, wait.Until(context.Background(), 60*time.Second, what+" receiving every event", func() (bool, string) {
		ds = got()
		problems := check(want, ds)
		return len(problems) == 0, strings.Join(problems, "; ")
	}))
	return ds
}

func kafkaDeliveries(t *testing.T, k *testsink.Kafka) func() []testsink.Delivery {
	return func() []testsink.Delivery {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ds, bad, err := k.Deliveries(ctx)
		if err != nil {
			return nil
		}
		require.Empty(t, bad)
		return ds
	}
}

// Every event reaches every sink, signed (webhooks) or keyed with its
// CloudEvents headers (Kafka), each once while the reaper lives, each
// order's events in order; a sink added later starts with the events to
// come, and "redeliver --after 0" gives it the rest.
func TestTheRelayDeliversEveryEventToEverySink(t *testing.T) {
	e := testenv.New(t, 1)
	v := e.SeedVoucher(t, db.Voucher{Stock: 1000}, -1)
	hookA, hookB := testsink.NewReceiver(t), testsink.NewReceiver(t)
	k := testsink.NewKafka(t, "orders.events")
	sinks := event.Config{WebhookURLs: []string{hookA.URL, hookB.URL}, WebhookSecret: testsink.Secret,
		KafkaBrokers: []string{k.Addr()}, KafkaTopic: "orders.events", Source: "shop-7"}
	_, reg := relaying(t, e, "relay-1", sinks)
	_, reg2 := relaying(t, e, "relay-1b", sinks) // two reapers: one holds each sink
	nameA, err := event.WebhookName(hookA.URL)
	require.NoError(t, err)
	testenv.Eventually(t, 10*time.Second, "the sinks held", func() bool {
		st, err := e.DB.SinkStates(context.Background())
		return err == nil && len(st) == 3
	})
	changeOrders(t, e, v, 0, 300)
	want := sequenced(t, e)
	require.Len(t, want, 300+200)

	for _, got := range []struct {
		name string
		get  func() []testsink.Delivery
	}{{"webhook A", hookA.Deliveries}, {"webhook B", hookB.Deliveries}, {"kafka", kafkaDeliveries(t, k)}} {
		ds := received(t, got.name, want, got.get)
		require.Zero(t, testsink.Duplicates(ds), "%s: the reapers lived, so each event went once", got.name)
		require.Contains(t, string(ds[0].Body), `"source":"shop-7"`)
	}
	require.Empty(t, hookA.Unverified())
	require.Empty(t, hookB.Unverified())
	testenv.Eventually(t, 10*time.Second, "the delivered counter and the backlog gauge", func() bool {
		return testenv.Metric(t, reg, "flashsale_events_delivered_total", "sink", nameA)+
			testenv.Metric(t, reg2, "flashsale_events_delivered_total", "sink", nameA) == 500 &&
			testenv.Metric(t, reg, "flashsale_events_undelivered", "sink", "kafka") == 0 &&
			testenv.Metric(t, reg2, "flashsale_events_undelivered", "sink", "kafka") == 0
	})

	// A sink added later gets what comes after it; a backfill the rest.
	late := testsink.NewReceiver(t)
	lateName, err := event.WebhookName(late.URL)
	require.NoError(t, err)
	relaying(t, e, "relay-2", event.Config{WebhookURLs: []string{late.URL}, WebhookSecret: testsink.Secret})
	testenv.Eventually(t, 10*time.Second, "the late sink held", func() bool {
		st, err := e.DB.SinkStates(context.Background())
		return err == nil && len(st) == 4
	})
	changeOrders(t, e, v, 300, 30)
	all := sequenced(t, e)
	received(t, "the late webhook", all[500:], late.Deliveries)
	require.Equal(t, 50, len(late.Deliveries()), "a new sink starts with the events to come")
	_, _, err = e.DB.RedeliverSink(context.Background(), lateName, 0)
	require.NoError(t, err)
	received(t, "the late webhook, backfilled", all, late.Deliveries)
	testenv.Eventually(t, 30*time.Second, "the backfill resent the events after 0, the 50 it had among them", func() bool {
		return len(late.Deliveries()) == 50+550
	})
}

// A failing endpoint is retried with backoff and holds back neither the
// other endpoints nor Kafka: one answering 500 and one closing the
// connection get every event once they recover; one that hangs has its
// events recorded failed after FLASHSALE_EVENTS_WEBHOOK_RETRY_FOR; one
// answering 410 is stopped until an operator redelivers.
func TestAFailingEndpointIsRetriedAndHoldsBackNoOther(t *testing.T) {
	e := testenv.New(t, 1)
	v := e.SeedVoucher(t, db.Voucher{Stock: 1000}, -1)
	healthy, flaky, closing, hanging, gone := testsink.NewReceiver(t), testsink.NewReceiver(t), testsink.NewReceiver(t),
		testsink.NewReceiver(t), testsink.NewReceiver(t)
	k := testsink.NewKafka(t, "flashsale.events")
	flaky.Answer(func(n int) testsink.Answer {
		if n <= 3 {
			return testsink.Fail
		}
		return testsink.OK
	})
	closing.Answer(func(n int) testsink.Answer {
		if n <= 2 {
			return testsink.Close
		}
		return testsink.OK
	})
	hanging.Always(testsink.Hang)
	gone.Always(testsink.Gone)
	urls := []string{healthy.URL, flaky.URL, closing.URL, hanging.URL, gone.URL}
	_, reg := relaying(t, e, "relay-1", event.Config{WebhookURLs: urls, WebhookSecret: testsink.Secret,
		WebhookTimeout: 200 * time.Millisecond, WebhookRetryFor: 3 * time.Second, KafkaBrokers: []string{k.Addr()}})
	name := sinksHeld(t, e, 6)
	changeOrders(t, e, v, 0, 60)
	want := sequenced(t, e)

	// Kafka and the healthy endpoint are done while the hanging one is
	// still retrying its first event.
	received(t, "kafka", want, kafkaDeliveries(t, k))
	received(t, "the healthy endpoint", want, healthy.Deliveries)
	require.Empty(t, hanging.Deliveries(), "the hanging endpoint has taken nothing")

	receivedOrFailed(t, e, "the endpoint that answered 500", name(flaky), want, flaky.Deliveries)
	receivedOrFailed(t, e, "the endpoint that closed the connection", name(closing), want, closing.Deliveries)
	// A failed turn counts its first failure's cause; under load that may
	// be another lane's 200 ms timeout.
	failures := func(r *testsink.Receiver, cause string) float64 {
		return testenv.Metric(t, reg, "flashsale_events_delivery_failures_total", "sink", name(r), "cause", cause) +
			testenv.Metric(t, reg, "flashsale_events_delivery_failures_total", "sink", name(r), "cause", "timeout")
	}
	require.Positive(t, failures(flaky, "http_5xx"))
	require.Positive(t, failures(closing, "connection"))

	// The hanging endpoint: each event recorded failed after its retries.
	testenv.Eventually(t, 60*time.Second, "the hanging endpoint's first events recorded failed", func() bool {
		return sinkState(t, e, name(hanging)).Failed >= 2
	})
	require.Positive(t, testenv.Metric(t, reg, "flashsale_events_delivery_failures_total", "sink", name(hanging), "cause", "timeout"))
	require.Positive(t, testenv.Metric(t, reg, "flashsale_events_failed_total", "sink", name(hanging)))
	// Once it answers (and the attempt in flight has ended, delivered or
	// recorded failed), "redeliver --failed" sends what failed; those come
	// after what followed them (EVENTS.md): every event is there, not in
	// its order's order.
	hanging.Always(testsink.OK)
	require.True(t, receivedOrFailed(t, e, "the endpoint that hung", name(hanging), want, hanging.Deliveries),
		"the hanging endpoint's failed events redelivered")

	// 410: stopped at once, nothing more sent, until redelivered.
	st := sinkState(t, e, name(gone))
	require.NotEmpty(t, st.Disabled)
	// A turn asks each lane once at most (a lane stops at its first
	// failure), and the turn that hears the 410 is the last: one turn
	// when every answer comes within the 200 ms timeout, more when a busy
	// machine made some of them time out (a loaded run: 25 asked, 16
	// lanes). Each failed turn counts one failure.
	turns := 0.0
	for _, cause := range event.Causes {
		turns += testenv.Metric(t, reg, "flashsale_events_delivery_failures_total", "sink", name(gone), "cause", cause)
	}
	asked := gone.Requests()
	require.LessOrEqual(t, float64(asked), event.WebhookLanes*turns, "an endpoint that is gone is asked at most once a lane a turn, the 410's turn the last")
	changeOrders(t, e, v, 60, 6)
	more := sequenced(t, e)
	received(t, "the healthy endpoint", more, healthy.Deliveries)
	require.Equal(t, asked, gone.Requests(), "nothing more goes to an endpoint that is gone")
	want = more
	require.Equal(t, 1.0, testenv.Metric(t, reg, "flashsale_events_delivery_failures_total", "sink", name(gone), "cause", "gone"))
	gone.Always(testsink.OK)
	_, _, err := e.DB.RedeliverSink(context.Background(), name(gone), 0)
	require.NoError(t, err)
	receivedOrFailed(t, e, "the endpoint that was gone", name(gone), want, gone.Deliveries)
	for _, r := range []*testsink.Receiver{healthy, flaky, closing, hanging, gone} {
		require.Empty(t, r.Unverified())
	}
}

// receivedOrFailed is received for a sink whose attempts may fail past
// its retry window (the hanging endpoint's by design; any other's on a
// busy machine, the test's 200 ms timeout and 3 s of retries): once its
// cursor is past the last event wanted, the events recorded failed on
// the way are redelivered (redeliver --failed) until none is left, and
// then every event must have arrived, in its order's order unless some
// were redelivered. It returns whether some were.
func receivedOrFailed(t *testing.T, e *testenv.Env, what, sink string, want []db.OutboxEvent, got func() []testsink.Delivery) (redelivered bool) {
	t.Helper()
	last := want[len(want)-1].Sequence
	testenv.Eventually(t, 60*time.Second, what+" past the last event", func() bool {
		return sinkState(t, e, sink).DeliveredUpto >= last
	})
	check := testsink.Check
	if sinkState(t, e, sink).Failed > 0 {
		t.Logf("%s: events recorded failed, redelivered", what)
		redelivered, check = true, testsink.CheckRedelivered
		testenv.Eventually(t, 60*time.Second, what+"'s failed events redelivered", func() bool {
			if sinkState(t, e, sink).Failed == 0 {
				return true
			}
			_, err := e.DB.RedeliverFailed(context.Background(), sink)
			require.NoError(t, err)
			return false
		})
	}
	receivedBy(t, what, want, got, check)
	return redelivered
}

func sinkState(t *testing.T, e *testenv.Env, name string) db.SinkState {
	t.Helper()
	states, err := e.DB.SinkStates(context.Background())
	require.NoError(t, err)
	for _, s := range states {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no sink %s", name)
	return db.SinkState{}
}

// Kafka gone for 30 s while orders change: the changes go on, their
// events wait, the age of the oldest undelivered rises; once the broker
// is back every event is delivered, each once, and the age falls to 0.
func TestKafkaGoneForThirtySecondsLosesNoEvent(t *testing.T) {
	e := testenv.New(t, 1)
	v := e.SeedVoucher(t, db.Voucher{Stock: 10000}, -1)
	k := testsink.NewKafka(t, "flashsale.events")
	_, reg := relaying(t, e, "relay-1", event.Config{KafkaBrokers: []string{k.Addr()}})
	testenv.Eventually(t, 10*time.Second, "the sink held", func() bool {
		st, err := e.DB.SinkStates(context.Background())
		return err == nil && len(st) == 1
	})
	changeOrders(t, e, v, 0, 100)
	received(t, "kafka", sequenced(t, e), kafkaDeliveries(t, k))

	k.Stop()
	gone := time.Now()
	for i := 1; i <= 60 && time.Since(gone) < 30*time.Second; i++ { // the sale goes on, within the stock
		changeOrders(t, e, v, 100*i, 100)
		testenv.Eventually(t, 10*time.Second, "the sequencer", func() bool {
			n, _, err := e.DB.EventBacklog(context.Background())
			return err == nil && n == 0
		})
		if testenv.Metric(t, reg, "flashsale_events_oldest_undelivered_age_seconds", "sink", "kafka") > 5 {
			break
		}
	}
	testenv.Eventually(t, 40*time.Second, "the age of the oldest undelivered event rose", func() bool {
		return testenv.Metric(t, reg, "flashsale_events_oldest_undelivered_age_seconds", "sink", "kafka") > 5
	})
	require.Positive(t, testenv.Metric(t, reg, "flashsale_events_undelivered", "sink", "kafka"))
	testenv.Eventually(t, 40*time.Second, "30 s", func() bool { return time.Since(gone) >= 30*time.Second })
	require.NoError(t, k.Start())
	ds := received(t, "kafka, back", sequenced(t, e), kafkaDeliveries(t, k))
	// A send that timed out while the broker was gone settled its records
	// before the relay produced them again: none arrives twice (before,
	// 155 did after 30 s).
	require.Empty(t, twice(ds), "records delivered twice with one reaper and no crash")
	testenv.Eventually(t, 30*time.Second, "the age fell", func() bool {
		return testenv.Metric(t, reg, "flashsale_events_oldest_undelivered_age_seconds", "sink", "kafka") == 0 &&
			testenv.Metric(t, reg, "flashsale_events_undelivered", "sink", "kafka") == 0
	})
	require.Positive(t, testenv.Metric(t, reg, "flashsale_events_delivery_failures_total", "sink", "kafka", "cause", "timeout")+
		testenv.Metric(t, reg, "flashsale_events_delivery_failures_total", "sink", "kafka", "cause", "kafka"))
}
