package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flashsale/flashsale/pkg/event"
	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/internal/testsink"
	"github.com/flashsale/flashsale/pkg/persist"
)

// The events rows (docs/BENCHMARKS.md, "The relay's cost and latency"):
// what relaying an event costs the reaper, one sink at a time with
// nothing else running, and how long after its commit an event reaches
// each sink during a sale at a steady rate.

// Sizes of the events rows.
const (
	eventsAloneOrders = 200_000
	latencyRate       = 5_000
	latencyFor        = 20 * time.Second
	latencyConns      = 64
)

// EventsRun is the events rows.
type EventsRun struct {
	// IdleReaperUSPerS: the relaying reaper's CPU a second just before
	// its sink was given the events (the most of the sinks'), taken off
	// its CPU while relaying.
	IdleReaperUSPerS float64       `json:"idle_reaper_us_per_s"`
	Alone            []SinkAlone   `json:"alone"`
	Latency          []SinkLatency `json:"latency"`
	// SaleOrdersPerS: the admissions per second the latency sale had.
	SaleOrdersPerS float64 `json:"sale_orders_per_s"`
}

// SinkAlone is one sink relayed alone: Events from the outbox, how long
// from the reaper's start until the sink's place reached the last, and
// the reaper's CPU an event (less an idle reaper's over that time).
type SinkAlone struct {
	Sink      string  `json:"sink"`
	Events    int     `json:"events"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"events_per_s"`
	ReaperUS  float64 `json:"reaper_us_per_event"`
}

// SinkLatency is the time from each event's commit (its time, written
// by MySQL in the change's transaction) to its arrival at a sink: the
// endpoint reading the body, the consumer polling the record.
type SinkLatency struct {
	Sink   string        `json:"sink"`
	Events int           `json:"events"`
	P50    time.Duration `json:"p50_ns"`
	P99    time.Duration `json:"p99_ns"`
	Max    time.Duration `json:"max_ns"`
}

// eventsRuns measures the events rows.
func eventsRuns(ctx context.Context, s *harness.Stack, cfg Config, tokens []string, host string) (*EventsRun, error) {
	r := &EventsRun{}
	// The outbox: a two-worker drain's rows (500 events a row), sequenced.
	if _, _, err := drain(ctx, s, "units", 1, 2, persist.BatchSizeDefault, eventsAloneOrders, ""); err != nil {
		return nil, err
	}
	last, err := sequenceAll(ctx, s)
	if err != nil {
		return nil, err
	}
	for _, kind := range []string{"kafka", "webhook"} {
		a, idle, err := sinkAlone(ctx, s, cfg, kind, last-eventsAloneOrders, last)
		if err != nil {
			return nil, err
		}
		cfg.logf("events: %s alone: %d events in %.2fs = %.0f events/s, reaper %.1f µs an event (idle before: %.0f µs/s)",
			a.Sink, a.Events, a.Seconds, a.PerSecond, a.ReaperUS, idle)
		r.Alone = append(r.Alone, a)
		r.IdleReaperUSPerS = max(r.IdleReaperUSPerS, idle)
	}
	lat, rate, err := latencyRun(ctx, s, tokens, host)
	if err != nil {
		return nil, err
	}
	r.Latency, r.SaleOrdersPerS = lat, rate
	for _, l := range lat {
		cfg.logf("events: during a sale of %.0f orders/s, %s: p50 %s, p99 %s, max %s after the commit", rate, l.Sink, l.P50, l.P99, l.Max)
	}
	return r, nil
}

// idleRate waits until process pid has spent under 5 % of a core for a
// whole second (its start, its first passes, done), at most 60 s, and
// returns its CPU a second over the 2 s after.
func idleRate(ctx context.Context, pid int) (float64, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		c0, err := procCPU(pid)
		if err != nil {
			return 0, err
		}
		if err := sleepCtx(ctx, time.Second); err != nil {
			return 0, err
		}
		c1, err := procCPU(pid)
		if err != nil {
			return 0, err
		}
		if c1-c0 < 50*time.Millisecond || time.Now().After(deadline) {
			break
		}
	}
	c0, err := procCPU(pid)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := sleepCtx(ctx, 2*time.Second); err != nil {
		return 0, err
	}
	c1, err := procCPU(pid)
	if err != nil {
		return 0, err
	}
	return float64((c1 - c0).Microseconds()) / time.Since(t0).Seconds(), nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// placeSink starts sink name at sequence after, as "reaper events
// redeliver --after" does, held by no reaper.
func placeSink(ctx context.Context, s *harness.Stack, name string, after int64) error {
	const setup = "bench-setup/0"
	if _, _, err := s.DB.HoldSink(ctx, name, setup, time.Millisecond); err != nil {
		return err
	}
	if _, _, err := s.DB.RedeliverSink(ctx, name, after); err != nil {
		return err
	}
	return s.DB.ReleaseSink(ctx, name, setup)
}

// sinkAt is where sink name stands.
func sinkAt(ctx context.Context, s *harness.Stack, name string) (int64, error) {
	var upto int64
	err := s.DB.DB().WithContext(ctx).Raw("SELECT delivered_upto FROM event_sinks WHERE name = ?", name).Scan(&upto).Error
	return upto, err
}

// sinkAlone relays the events after from up to last to one sink of kind
// (kafka, webhook) from a reaper with nothing else to do: the reaper
// starts with the sink at last, and once its start and first passes are
// done (its reconciliation reads every order), "redeliver --after from"
// gives the sink its events. It returns the sink's row and the reaper's
// idle CPU a second just before, taken off its CPU while relaying.
func sinkAlone(ctx context.Context, s *harness.Stack, cfg Config, kind string, from, last int64) (SinkAlone, float64, error) {
	a := SinkAlone{Events: int(last - from)}
	var env []string
	var received func() (int64, error)
	switch kind {
	case "kafka":
		k, err := testsink.StartKafka("", "flashsale.events")
		if err != nil {
			return a, 0, err
		}
		defer k.Stop()
		a.Sink, env = "kafka", []string{"FLASHSALE_EVENTS_KAFKA_BROKERS=" + k.Addr()}
		received = func() (int64, error) { return k.Records(ctx) }
	default:
		hook := testsink.StartReceiver()
		defer hook.Close()
		name, err := event.WebhookName(hook.URL)
		if err != nil {
			return a, 0, err
		}
		a.Sink, env = name, []string{"FLASHSALE_EVENTS_WEBHOOK_URLS=" + hook.URL, "FLASHSALE_EVENTS_WEBHOOK_SECRET=" + testsink.Secret}
		received = func() (int64, error) { return int64(hook.Delivered()), nil }
	}
	if err := placeSink(ctx, s, a.Sink, last); err != nil {
		return a, 0, err
	}
	p, err := s.StartReaper(append([]string{"FLASHSALE_CONSUMER_NAME=bench-alone-" + kind}, env...)...)
	if err != nil {
		return a, 0, err
	}
	defer func() { _ = p.Stop(30 * time.Second) }()
	if err := waitReady(p); err != nil {
		return a, 0, err
	}
	idle, err := idleRate(ctx, p.Pid())
	if err != nil {
		return a, 0, err
	}
	if _, _, err := s.DB.RedeliverSink(ctx, a.Sink, from); err != nil {
		return a, 0, err
	}
	c0, err := procCPU(p.Pid())
	if err != nil {
		return a, 0, err
	}
	t0 := time.Now()
	if cfg.ProfileDir != "" {
		prof := profile(p.PprofURL, 2*time.Second, filepath.Join(cfg.ProfileDir, "reaper-relay-"+kind+".cpu.pprof"))
		defer func() { <-prof }()
	}
	if err := until(ctx, 5*time.Minute, a.Sink+" relayed", func() (bool, string) {
		at, err := sinkAt(ctx, s, a.Sink)
		return err == nil && at >= last, fmt.Sprintf("at %d of %d (%v)", at, last, err)
	}); err != nil {
		return a, 0, err
	}
	a.Seconds = time.Since(t0).Seconds()
	c1, err := procCPU(p.Pid())
	if err != nil {
		return a, 0, err
	}
	got, err := received()
	if err != nil {
		return a, 0, err
	}
	if got < int64(a.Events) {
		return a, 0, fmt.Errorf("%s: %d of %d events received", a.Sink, got, a.Events)
	}
	a.PerSecond = float64(a.Events) / a.Seconds
	a.ReaperUS = (float64((c1 - c0).Microseconds()) - idle*a.Seconds) / float64(a.Events)
	return a, idle, nil
}

// latencyRun sells at latencyRate claims a second for latencyFor, open
// loop, with two workers and a reaper relaying to a webhook endpoint and
// Kafka, and measures each event's time from its commit to each sink.
func latencyRun(ctx context.Context, s *harness.Stack, tokens []string, host string) ([]SinkLatency, float64, error) {
	n := int64(latencyRate * latencyFor / time.Second)
	if int64(len(tokens)) < n {
		return nil, 0, fmt.Errorf("latency: %d tokens for %d claims", len(tokens), n)
	}
	v, err := s.CreateVoucher(ctx, spec("events-latency", "units", n+1000))
	if err != nil {
		return nil, 0, err
	}
	if err := inRedis(ctx, s, v); err != nil {
		return nil, 0, err
	}
	hook := testsink.StartReceiver()
	defer hook.Close()
	k, err := testsink.StartKafka("", "flashsale.events")
	if err != nil {
		return nil, 0, err
	}
	defer k.Stop()
	hookName, err := event.WebhookName(hook.URL)
	if err != nil {
		return nil, 0, err
	}
	last, err := sequenceAll(ctx, s)
	if err != nil {
		return nil, 0, err
	}
	for _, name := range []string{"kafka", hookName} {
		if err := placeSink(ctx, s, name, last); err != nil {
			return nil, 0, err
		}
	}
	var procs []*harness.Proc
	defer func() {
		for _, p := range procs {
			_ = p.Stop(30 * time.Second)
		}
	}()
	reaper, err := s.StartReaper("FLASHSALE_CONSUMER_NAME=bench-latency", "FLASHSALE_EVENTS_WEBHOOK_URLS="+hook.URL,
		"FLASHSALE_EVENTS_WEBHOOK_SECRET="+testsink.Secret, "FLASHSALE_EVENTS_KAFKA_BROKERS="+k.Addr())
	if err != nil {
		return nil, 0, err
	}
	procs = append(procs, reaper)
	for i := range 2 {
		w, err := s.StartWorkerWith(fmt.Sprintf("latency-%d-%d", v, i))
		if err != nil {
			return nil, 0, err
		}
		procs = append(procs, w)
	}
	for _, p := range procs {
		if err := waitReady(p); err != nil {
			return nil, 0, err
		}
	}
	arrivals, stopConsumer, err := consumeArrivals(k.Addr())
	if err != nil {
		return nil, 0, err
	}
	defer stopConsumer()

	path := "/v1/vouchers/" + strconv.FormatInt(v, 10) + "/orders"
	res := Drive(Load{Addr: host, Conns: latencyConns, Duration: latencyFor, Rate: latencyRate, MaxRequests: n,
		Next: func(i int64) []byte { return Request(host, path, tokens[i]) }})
	admitted := int(res.Status[202])
	rate := float64(admitted) / res.Duration.Seconds()
	if admitted == 0 {
		return nil, 0, errors.New("latency: no claim admitted")
	}
	if err := until(ctx, 3*time.Minute, "both sinks had every event of the sale", func() (bool, string) {
		h, kf := hook.Delivered(), arrivals.count()
		return h >= admitted && kf >= admitted, fmt.Sprintf("webhook %d, kafka %d of %d", h, kf, admitted)
	}); err != nil {
		return nil, 0, err
	}
	var out []SinkLatency
	hh := hdrhistogram.New(1, 600_000_000, 3)
	for _, d := range hook.Deliveries() {
		t, err := eventTime(d.Body)
		if err != nil {
			return nil, 0, err
		}
		_ = hh.RecordValue(max(d.At.Sub(t).Microseconds(), 1))
	}
	out = append(out, latencyOf("webhook", hh))
	kh := hdrhistogram.New(1, 600_000_000, 3)
	for _, lat := range arrivals.latencies() {
		_ = kh.RecordValue(max(lat.Microseconds(), 1))
	}
	out = append([]SinkLatency{latencyOf("kafka", kh)}, out...)
	return out, rate, nil
}

func latencyOf(sink string, h *hdrhistogram.Histogram) SinkLatency {
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	return SinkLatency{Sink: sink, Events: int(h.TotalCount()), P50: us(h.ValueAtQuantile(50)), P99: us(h.ValueAtQuantile(99)), Max: us(h.Max())}
}

// eventTime is an event body's time.
func eventTime(body []byte) (time.Time, error) {
	var ev struct {
		Time time.Time `json:"time"`
	}
	err := json.Unmarshal(body, &ev)
	return ev.Time, err
}

// kafkaArrivals is when each event (by id) was first polled from the
// topic, and its latency from its time.
type kafkaArrivals struct {
	mu   sync.Mutex
	seen map[string]time.Duration
}

func (a *kafkaArrivals) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.seen)
}

func (a *kafkaArrivals) latencies() []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]time.Duration, 0, len(a.seen))
	for _, d := range a.seen {
		out = append(out, d)
	}
	return out
}

// consumeArrivals reads the topic from its start until stopped, as a
// consumer in another process would, noting when each record arrives.
func consumeArrivals(addr string) (*kafkaArrivals, func(), error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("flashsale.events"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, nil, err
	}
	a := &kafkaArrivals{seen: map[string]time.Duration{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			fs.EachRecord(func(rec *kgo.Record) {
				var ev struct{ ID, Time string }
				if json.Unmarshal(rec.Value, &ev) != nil {
					return
				}
				id := ev.ID
				t, err := time.Parse(time.RFC3339Nano, ev.Time)
				if err != nil || id == "" {
					return
				}
				a.mu.Lock()
				if _, ok := a.seen[id]; !ok {
					a.seen[id] = now.Sub(t)
				}
				a.mu.Unlock()
			})
		}
	}()
	return a, func() { cancel(); <-done; cl.Close() }, nil
}

// printEvents writes the events rows.
func (r *Report) printEvents(w io.Writer) {
	x := r.Events
	if x == nil {
		return
	}
	fmt.Fprintf(w, "\norder events: the reaper relaying one sink alone (%d events in the outbox, nothing else running; the reaper's idle CPU, at most %.0f µs/s, taken off)\n",
		eventsAloneOrders, x.IdleReaperUSPerS)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "sink\tevents\tseconds\tevents/s\treaper µs/event\t")
	for _, a := range x.Alone {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.0f\t%.1f\t\n", a.Sink, a.Events, a.Seconds, a.PerSecond, a.ReaperUS)
	}
	tw.Flush()
	fmt.Fprintf(w, "\norder events: commit to sink during a sale, open loop at %d claims/s for %s (%.0f admitted/s), 2 workers, a reaper relaying to both\n",
		latencyRate, latencyFor, x.SaleOrdersPerS)
	tw = tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "sink\tevents\tp50\tp99\tmax\t")
	for _, l := range x.Latency {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t\n", l.Sink, l.Events, l.P50.Round(time.Millisecond), l.P99.Round(time.Millisecond), l.Max.Round(time.Millisecond))
	}
	tw.Flush()
}
