package reaper_test

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/event"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testsink"
	"github.com/flashsale/flashsale/pkg/reaper"
	"github.com/flashsale/flashsale/pkg/worker"
)

// twice lists the event ids ds holds more than once.
func twice(ds []testsink.Delivery) []string {
	seen := map[string]int{}
	var out []string
	for _, d := range ds {
		if seen[d.ID]++; seen[d.ID] == 2 {
			out = append(out, d.ID+" (sequence "+d.Sequence+")")
		}
	}
	return out
}

// Two reapers of one name (two started alike on a host) relay each sink
// from one of them at a time: with no crash, no event arrives twice at
// the webhook endpoint or in Kafka.
func TestTwoReapersOfOneNameRelayEachEventOnce(t *testing.T) {
	e := testenv.New(t, 1)
	v := e.SeedVoucher(t, db.Voucher{Stock: 10000}, -1)
	hook := testsink.NewReceiver(t)
	k := testsink.NewKafka(t, "flashsale.events")
	cfg := event.Config{WebhookURLs: []string{hook.URL}, WebhookSecret: testsink.Secret, KafkaBrokers: []string{k.Addr()}}
	relaying(t, e, "reaper-samehost", cfg)
	relaying(t, e, "reaper-samehost", cfg)
	sinksHeld(t, e, 2)
	for round := range 5 { // changes while both relay, so both are at the leases
		changeOrders(t, e, v, round*60, 60)
	}
	want := sequenced(t, e)
	hooked := received(t, "the webhook endpoint", want, hook.Deliveries)
	kafka := received(t, "kafka", want, kafkaDeliveries(t, k))
	require.Empty(t, twice(hooked), "webhook deliveries of one event twice")
	require.Empty(t, twice(kafka), "kafka records of one event twice")
	for _, st := range []db.SinkState{sinkState(t, e, "kafka")} {
		require.Contains(t, st.Owner, "reaper-samehost/", "the lease is held by a token of the process")
	}
}

// An endpoint answering 500 has every event recorded failed after
// FLASHSALE_EVENTS_WEBHOOK_RETRY_FOR, the first of each outbox row
// (a batch's, each payment's) among them; while stopped by 410 another
// endpoint's backlog ages in the gauge. Once both answer, "redeliver
// --failed" sends each failed event exactly once, none recorded
// deleted, and "redeliver" restarts the stopped one.
func TestFailedEventsAreRedeliveredOnceAndAStoppedSinkAges(t *testing.T) {
	e := testenv.New(t, 1)
	v := e.SeedVoucher(t, db.Voucher{Stock: 100}, -1)
	failing, gone := testsink.NewReceiver(t), testsink.NewReceiver(t)
	failing.Always(testsink.Fail)
	gone.Always(testsink.Gone)
	_, reg := relaying(t, e, "relay-1", event.Config{WebhookURLs: []string{failing.URL, gone.URL}, WebhookSecret: testsink.Secret,
		WebhookTimeout: 200 * time.Millisecond, WebhookRetryFor: 300 * time.Millisecond})
	name := sinksHeld(t, e, 2)
	changeOrders(t, e, v, 0, 6) // a batch's row of 6, then a row each for 2 payments and 2 cancels
	want := sequenced(t, e)
	require.Len(t, want, 10)
	testenv.Eventually(t, 90*time.Second, "every event recorded failed", func() bool {
		st := sinkState(t, e, name(failing))
		return st.Failed == int64(len(want)) && st.DeliveredUpto == want[len(want)-1].Sequence
	})
	testenv.Eventually(t, 30*time.Second, "the stopped endpoint's backlog ages", func() bool {
		st := sinkState(t, e, name(gone))
		return st.Disabled != "" && st.Oldest != nil &&
			testenv.Metric(t, reg, "flashsale_events_oldest_undelivered_age_seconds", "sink", name(gone)) > 0 &&
			testenv.Metric(t, reg, "flashsale_events_undelivered", "sink", name(gone)) == float64(len(want))
	})

	failing.Always(testsink.OK)
	n, err := e.DB.RedeliverFailed(context.Background(), name(failing))
	require.NoError(t, err)
	require.EqualValues(t, len(want), n)
	testenv.Eventually(t, 60*time.Second, "the failed events redelivered", func() bool {
		return sinkState(t, e, name(failing)).Failed == 0
	})
	ds := receivedBy(t, "the endpoint that failed", want, failing.Deliveries, testsink.CheckRedelivered)
	require.Len(t, ds, len(want), "each failed event once: %v", twice(ds))

	gone.Always(testsink.OK)
	_, _, err = e.DB.RedeliverSink(context.Background(), name(gone), 0)
	require.NoError(t, err)
	received(t, "the endpoint that was gone", want, gone.Deliveries)
	testenv.Eventually(t, 30*time.Second, "its backlog gauge back to 0", func() bool {
		return testenv.Metric(t, reg, "flashsale_events_oldest_undelivered_age_seconds", "sink", name(gone)) == 0
	})
}

// A webhook URL's credentials and query never show: not in the sink's
// name, its stored error, the sinks' state the API, the console and the
// CLI read, nor the reaper's log, whatever the failure.
func TestAWebhookURLsCredentialsNeverShow(t *testing.T) {
	e := testenv.New(t, 1)
	v := e.SeedVoucher(t, db.Voucher{Stock: 100}, -1)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refusing := "http://" + l.Addr().String() + "/hooks" // a port that refuses connections
	require.NoError(t, l.Close())
	failing := testsink.NewReceiver(t)
	failing.Always(testsink.Fail)
	secretURL := func(u string) string {
		return strings.Replace(u, "http://", "http://user:PASSWORD123@", 1) + "?api_key=QUERYSECRET456#frag"
	}
	core, logs := observer.New(zap.DebugLevel)
	cfg := reaper.Config{Config: worker.Config{Consumer: "relay-1", TakeoverMinIdle: time.Second, Block: time.Millisecond},
		ConsumerGoneAfter: time.Hour, Interval: time.Hour, EventsInterval: 20 * time.Millisecond,
		EventsConfig: event.Config{WebhookURLs: []string{secretURL(refusing), secretURL(failing.URL)}, WebhookSecret: testsink.Secret,
			WebhookTimeout: 200 * time.Millisecond}}
	r, err := reaper.New(cfg, e.RDB, e.DB, zap.New(core), reaper.WithRegistry(prometheus.NewRegistry()))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	changeOrders(t, e, v, 0, 3)
	testenv.Eventually(t, 30*time.Second, "both endpoints retrying, their errors stored", func() bool {
		states, err := e.DB.SinkStates(context.Background())
		if err != nil || len(states) != 2 {
			return false
		}
		for _, st := range states {
			if st.LastError == "" {
				return false
			}
		}
		return true
	})
	states, err := e.DB.SinkStates(context.Background())
	require.NoError(t, err)
	var shown []string
	for _, st := range states {
		s := event.StatusOf(st, 0, time.Now())
		shown = append(shown, fmt.Sprintf("%+v", st), fmt.Sprintf("%+v", s))
	}
	for _, entry := range logs.All() {
		b, err := json.Marshal(entry.ContextMap())
		require.NoError(t, err)
		shown = append(shown, entry.Message+" "+string(b))
	}
	require.NotEmpty(t, logs.FilterMessage("event not delivered: retrying").All(), "the failures were logged")
	for _, s := range shown {
		for _, secret := range []string{"PASSWORD123", "QUERYSECRET456", "frag", "user:"} {
			require.NotContains(t, s, secret)
		}
	}
	var stored int64
	require.NoError(t, e.DB.DB().Raw("SELECT COUNT(*) FROM event_sinks WHERE CONCAT(name, last_error) LIKE '%SECRET%' OR CONCAT(name, last_error) LIKE '%PASSWORD%'").Scan(&stored).Error)
	require.Zero(t, stored, "event_sinks holds no credential")
}

// sinksHeld waits until the reapers hold n sinks, and returns the sink
// name of a webhook endpoint.
func sinksHeld(t *testing.T, e *testenv.Env, n int) func(*testsink.Receiver) string {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, "the sinks held", func() bool {
		st, err := e.DB.SinkStates(context.Background())
		return err == nil && len(st) == n
	})
	return func(r *testsink.Receiver) string {
		name, err := event.WebhookName(r.URL)
		require.NoError(t, err)
		return name
	}
}

// An endpoint answering 500 to 5 % of first attempts (chosen by event
// id) through a sale of about 600 events stays current: every event is
// delivered, each answered 2xx exactly once (a lane's deliveries are not
// sent again for another lane's failure), and the last within 20 s of the
// last change (the failing lane backs off on its own; the others go on).
func TestAFlakyEndpointStaysCurrentAndGetsEachEventOnce(t *testing.T) {
	e := testenv.New(t, 1)
	v := e.SeedVoucher(t, db.Voucher{Stock: 1000}, -1)
	flaky := testsink.NewReceiver(t)
	failed := 0
	flaky.AnswerEvents(func(id string, attempt int) testsink.Answer {
		if attempt == 1 && crc32.ChecksumIEEE([]byte(id))%20 == 0 {
			failed++
			return testsink.Fail
		}
		return testsink.OK
	})
	relaying(t, e, "relay-flaky", event.Config{WebhookURLs: []string{flaky.URL}, WebhookSecret: testsink.Secret,
		WebhookTimeout: 2 * time.Second})
	sinksHeld(t, e, 1)
	changeOrders(t, e, v, 0, 360) // 360 created, 120 paid, 120 cancelled
	changed := time.Now()
	want := sequenced(t, e)
	require.GreaterOrEqual(t, len(want), 590)
	ds := received(t, "the flaky endpoint", want, flaky.Deliveries)
	last := ds[0].At
	for _, d := range ds {
		if d.At.After(last) {
			last = d.At
		}
	}
	t.Logf("%d events, %d first attempts answered 500, the last delivered %s after the last change", len(want), failed,
		last.Sub(changed).Round(time.Millisecond))
	require.Positive(t, failed, "no attempt failed: the test has no power")
	require.Empty(t, twice(flaky.Deliveries()), "events answered 2xx more than once")
	require.Less(t, last.Sub(changed), 20*time.Second, "the last event within 20 s of the last change")
	require.Empty(t, flaky.Unverified())
}

// relayingFor runs a reaper with the sinks cfg sets until stop or the
// test's end; stop returns once it has stopped.
func relayingFor(t *testing.T, e *testenv.Env, name string, events event.Config) (stop func()) {
	t.Helper()
	cfg := reaper.Config{Config: worker.Config{Consumer: name, TakeoverMinIdle: time.Second, Block: time.Millisecond},
		ConsumerGoneAfter: time.Hour, Interval: time.Hour, EventsInterval: 20 * time.Millisecond, EventsConfig: events}
	r, err := reaper.New(cfg, e.RDB, e.DB, zaptest.NewLogger(t), reaper.WithRegistry(prometheus.NewRegistry()))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

// partOwners is each row of sink's owner, by row name, once there are
// parts rows each held.
func partOwners(t *testing.T, e *testenv.Env, sink string, parts int, held func(owners map[string]string) bool) map[string]string {
	t.Helper()
	var owners map[string]string
	testenv.Eventually(t, 30*time.Second, sink+"'s parts held", func() bool {
		states, err := e.DB.SinkStates(context.Background())
		if err != nil {
			return false
		}
		owners = map[string]string{}
		for _, st := range states {
			if db.SinkOfRow(st.Name) == sink && st.Owner != "" && st.LeaseUntil != nil {
				owners[st.Name] = st.Owner
			}
		}
		return len(owners) == parts && held(owners)
	})
	return owners
}

// Two reapers relay Kafka in two parts, one each; the broker goes away
// while orders change, and one reaper stops while it is away: its part
// moves to the other, which relays both once the broker is back. Every
// event arrives, each once (no reaper crashed), each order's in order
// (the stopped reaper's unacknowledged records were failed before it
// gave its lease up: none lands after the next holder's).
func TestAPartMovesWhileKafkaIsAwayAndNothingArrivesTwice(t *testing.T) {
	e := testenv.New(t, 1)
	v := e.SeedVoucher(t, db.Voucher{Stock: 10000}, -1)
	k := testsink.NewKafka(t, "flashsale.events")
	cfg := event.Config{KafkaBrokers: []string{k.Addr()}, RelayParts: 2, RelayLease: 4 * time.Second}
	stopA := relayingFor(t, e, "reaper-a", cfg)
	relayingFor(t, e, "reaper-b", cfg)
	partOwners(t, e, "kafka", 2, func(o map[string]string) bool { return o["kafka#1/2"] != o["kafka#2/2"] })
	changeOrders(t, e, v, 0, 100)
	received(t, "kafka", sequenced(t, e), kafkaDeliveries(t, k))

	k.Stop()
	for i := 1; i <= 3; i++ { // created, paid and cancelled while the broker is away
		changeOrders(t, e, v, 100*i, 100)
	}
	sequenced(t, e)
	stopA()
	owners := partOwners(t, e, "kafka", 2, func(o map[string]string) bool {
		return strings.HasPrefix(o["kafka#1/2"], "reaper-b/") && strings.HasPrefix(o["kafka#2/2"], "reaper-b/")
	})
	t.Logf("after reaper-a stopped: %v", owners)
	require.NoError(t, k.Start())
	ds := received(t, "kafka, back", sequenced(t, e), kafkaDeliveries(t, k))
	require.Empty(t, twice(ds), "records delivered twice without a crash")
}
