package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flashsale/flashsale/pkg/event"
	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/internal/testsink"
	"github.com/flashsale/flashsale/pkg/internal/wait"
	"github.com/flashsale/flashsale/pkg/persist"
)

// The events rows (docs/BENCHMARKS.md, "The relay's cost and latency"):
// what relaying an event costs the reaper, one sink at a time with
// nothing else running, and how long after its commit an event reaches
// each sink during a sale at a steady rate.

// Sizes of the events rows.
const (
	eventsAloneOrders = 200_000
	// relayParts: the parts of the rows relayed by 1, 2 and 3 reapers.
	relayParts  = 3
	latencyRate = 5_000
	// flakyRate: the sale beside an endpoint failing 1 % of first
	// attempts, at a rate one reaper relays to two endpoints on this
	// machine (alone, about 11,000 events/s to one).
	flakyRate    = 1_000
	latencyFor   = 20 * time.Second
	latencyConns = 64
)

// EventsRun is the events rows.
type EventsRun struct {
	// IdleReaperUSPerS: the relaying reaper's CPU a second just before
	// its sink was given the events (the most of the sinks'), taken off
	// its CPU while relaying.
	IdleReaperUSPerS float64     `json:"idle_reaper_us_per_s"`
	Alone            []SinkAlone `json:"alone"`
	// Parts: one sink relayed in relayParts parts by 1, 2 and 3 reapers.
	Parts   []SinkAlone   `json:"parts"`
	Latency []SinkLatency `json:"latency"`
	// Flaky: a sale at flakyRate relayed to a webhook endpoint and one
	// failing 1 % of first attempts; FlakyOrdersPerS its admissions.
	Flaky           []SinkLatency `json:"flaky,omitempty"`
	FlakyOrdersPerS float64       `json:"flaky_orders_per_s,omitempty"`
	// SaleOrdersPerS: the admissions per second the latency sale had.
	SaleOrdersPerS float64 `json:"sale_orders_per_s"`
}

// SinkAlone is one sink relayed alone, by Reapers reapers in Parts
// parts: Events from the outbox, how long from the redeliver until every
// part's place reached the last, and the reapers' CPU an event (less
// idle reapers' over that time).
type SinkAlone struct {
	Sink      string  `json:"sink"`
	Reapers   int     `json:"reapers"`
	Parts     int     `json:"parts"`
	Events    int     `json:"events"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"events_per_s"`
	ReaperUS  float64 `json:"reaper_us_per_event"`
}

// SinkLatency is the time from each event's commit (its time, written
// by MySQL in the change's transaction) to its arrival at a sink: the
// endpoint reading the body, the consumer polling the record.
type SinkLatency struct {
	Sink   string `json:"sink"`
	Events int    `json:"events"`
	// A webhook endpoint's: events answered 2xx twice, and its requests
	// an event.
	Twice            int           `json:"twice,omitempty"`
	RequestsPerEvent float64       `json:"requests_per_event,omitempty"`
	P50              time.Duration `json:"p50_ns"`
	P99              time.Duration `json:"p99_ns"`
	Max              time.Duration `json:"max_ns"`
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
		a, idle, err := sinkAlone(ctx, s, cfg, kind, last-eventsAloneOrders, last, 1, 1)
		if err != nil {
			return nil, err
		}
		cfg.logf("events: %s alone: %d events in %.2fs = %.0f events/s, reaper %.1f µs an event (idle before: %.0f µs/s)",
			a.Sink, a.Events, a.Seconds, a.PerSecond, a.ReaperUS, idle)
		r.Alone = append(r.Alone, a)
		r.IdleReaperUSPerS = max(r.IdleReaperUSPerS, idle)
	}
	for _, kind := range []string{"kafka", "webhook"} {
		for reapers := 1; reapers <= 3; reapers++ {
			a, idle, err := sinkAlone(ctx, s, cfg, kind, last-eventsAloneOrders, last, reapers, relayParts)
			if err != nil {
				return nil, err
			}
			cfg.logf("events: %s in %d parts, %d reapers: %d events in %.2fs = %.0f events/s, reapers %.1f µs an event (idle before: %.0f µs/s)",
				a.Sink, a.Parts, a.Reapers, a.Events, a.Seconds, a.PerSecond, a.ReaperUS, idle)
			r.Parts = append(r.Parts, a)
		}
	}
	lat, rate, err := latencyRun(ctx, s, tokens, host, latencyRate, false)
	if err != nil {
		return nil, err
	}
	r.Latency, r.SaleOrdersPerS = lat, rate
	for _, l := range lat {
		cfg.logf("events: during a sale of %.0f orders/s, %s: p50 %s, p99 %s, max %s after the commit", rate, l.Sink, l.P50, l.P99, l.Max)
	}
	if lat, rate, err = latencyRun(ctx, s, tokens[latencyRate*latencyFor/time.Second:], host, flakyRate, true); err != nil {
		return nil, err
	}
	r.Flaky, r.FlakyOrdersPerS = lat, rate
	for _, l := range lat {
		cfg.logf("events: during a sale of %.0f orders/s, %s: p50 %s, p99 %s, max %s after the commit, %.3f requests an event, %d twice",
			rate, l.Sink, l.P50, l.P99, l.Max, l.RequestsPerEvent, l.Twice)
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
// redeliver --after" does, held by no reaper, in one part (reapers set
// to more parts make it theirs, each part at after).
func placeSink(ctx context.Context, s *harness.Stack, name string, after int64) error {
	const setup = "bench-setup/0"
	if err := s.DB.DB().WithContext(ctx).Exec("DELETE FROM event_sinks WHERE name = ? OR name LIKE CONCAT(?, '#%')", name, name).Error; err != nil {
		return err
	}
	if _, _, err := s.DB.HoldSink(ctx, name, setup, time.Millisecond); err != nil {
		return err
	}
	if _, _, err := s.DB.RedeliverSink(ctx, name, after); err != nil {
		return err
	}
	return s.DB.ReleaseSink(ctx, name, setup)
}

// sinkAt is where sink name stands: its part furthest behind.
func sinkAt(ctx context.Context, s *harness.Stack, name string) (int64, error) {
	var upto int64
	err := s.DB.DB().WithContext(ctx).Raw("SELECT MIN(delivered_upto) FROM event_sinks WHERE name = ? OR name LIKE CONCAT(?, '#%')", name, name).
		Scan(&upto).Error
	return upto, err
}

// sinksHeld waits until sink name's parts are held, by as many reapers
// as there are, or parts.
func sinksHeld(ctx context.Context, s *harness.Stack, name string, parts, reapers int) error {
	return wait.Until(ctx, time.Minute, name+"'s parts held", func() (bool, string) {
		var rows []struct{ Name, Owner string }
		err := s.DB.DB().WithContext(ctx).Raw(`SELECT name, COALESCE(owner, '') AS owner FROM event_sinks
			WHERE (name = ? OR name LIKE CONCAT(?, '#%')) AND lease_until > UTC_TIMESTAMP(3)`, name, name).Scan(&rows).Error
		owners := map[string]bool{}
		for _, r := range rows {
			owners[r.Owner] = true
		}
		return err == nil && len(rows) == parts && len(owners) == min(parts, reapers), fmt.Sprintf("%v (%v)", rows, err)
	})
}

// sinkAlone relays the events after from up to last to one sink of kind
// (kafka, webhook) from reapers reapers with nothing else to do, the
// sink in parts parts: the reapers start with the sink at last, and
// once their start and first passes are done (a reconciliation reads
// every order) and each holds its share of the parts, "redeliver --after
// from" gives the sink its events. It returns the sink's row and the
// reapers' idle CPU a second just before, taken off their CPU while
// relaying.
func sinkAlone(ctx context.Context, s *harness.Stack, cfg Config, kind string, from, last int64, reapers, parts int) (SinkAlone, float64, error) {
	a := SinkAlone{Events: int(last - from), Reapers: reapers, Parts: parts}
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
	env = append(env, "FLASHSALE_EVENTS_RELAY_PARTS="+strconv.Itoa(parts))
	var procs []*harness.Proc
	defer func() {
		for _, p := range procs {
			_ = p.Stop(30 * time.Second)
		}
	}()
	for i := range reapers {
		p, err := s.StartReaper(append([]string{fmt.Sprintf("FLASHSALE_CONSUMER_NAME=bench-%s-%d", kind, i)}, env...)...)
		if err != nil {
			return a, 0, err
		}
		procs = append(procs, p)
		if err := waitReady(p); err != nil {
			return a, 0, err
		}
	}
	if err := sinksHeld(ctx, s, a.Sink, parts, reapers); err != nil {
		return a, 0, err
	}
	idle := 0.0
	for _, p := range procs {
		r, err := idleRate(ctx, p.Pid())
		if err != nil {
			return a, 0, err
		}
		idle += r
	}
	if _, _, err := s.DB.RedeliverSink(ctx, a.Sink, from); err != nil {
		return a, 0, err
	}
	cpu := func() (time.Duration, error) {
		var sum time.Duration
		for _, p := range procs {
			c, err := procCPU(p.Pid())
			if err != nil {
				return 0, err
			}
			sum += c
		}
		return sum, nil
	}
	c0, err := cpu()
	if err != nil {
		return a, 0, err
	}
	t0 := time.Now()
	if cfg.ProfileDir != "" && reapers == 1 && parts == 1 {
		prof := profile(procs[0].PprofURL, 2*time.Second, filepath.Join(cfg.ProfileDir, "reaper-relay-"+kind+".cpu.pprof"))
		defer func() { <-prof }()
	}
	if err := wait.Until(ctx, 5*time.Minute, a.Sink+" relayed", func() (bool, string) {
		at, err := sinkAt(ctx, s, a.Sink)
		return err == nil && at >= last, fmt.Sprintf("at %d of %d (%v)", at, last, err)
	}); err != nil {
		return a, 0, err
	}
	a.Seconds = time.Since(t0).Seconds()
	c1, err := cpu()
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

// latencyRun sells at rate claims a second for latencyFor, open loop,
// with two workers and a reaper relaying to Kafka and a webhook endpoint
// (flaky: to a webhook endpoint and one answering 500 to 1 % of first
// attempts, by event id), and measures each event's time from its commit
// to each sink.
func latencyRun(ctx context.Context, s *harness.Stack, tokens []string, host string, rate int, flaky bool) ([]SinkLatency, float64, error) {
	n := int64(rate) * int64(latencyFor/time.Second)
	if int64(len(tokens)) < n {
		return nil, 0, fmt.Errorf("latency: %d tokens for %d claims", len(tokens), n)
	}
	v, err := s.CreateVoucher(ctx, spec(fmt.Sprintf("events-latency-%d", rate), "units", n+1000))
	if err != nil {
		return nil, 0, err
	}
	if err := inRedis(ctx, s, v); err != nil {
		return nil, 0, err
	}
	type hookSink struct {
		row  string
		name string
		hook *testsink.Receiver
	}
	hooks := []hookSink{{row: "webhook", hook: testsink.StartReceiver()}}
	if flaky {
		f := testsink.StartReceiver()
		f.AnswerEvents(func(id string, attempt int) testsink.Answer {
			if attempt == 1 && crc32.ChecksumIEEE([]byte(id))%100 == 0 {
				return testsink.Fail
			}
			return testsink.OK
		})
		hooks = append(hooks, hookSink{row: "webhook, 1 % of first attempts answered 500", hook: f})
	}
	env := []string{fmt.Sprintf("FLASHSALE_CONSUMER_NAME=bench-latency-%d", rate), "FLASHSALE_EVENTS_WEBHOOK_SECRET=" + testsink.Secret}
	var urls, names []string
	for i := range hooks {
		defer hooks[i].hook.Close()
		if hooks[i].name, err = event.WebhookName(hooks[i].hook.URL); err != nil {
			return nil, 0, err
		}
		urls, names = append(urls, hooks[i].hook.URL), append(names, hooks[i].name)
	}
	env = append(env, "FLASHSALE_EVENTS_WEBHOOK_URLS="+strings.Join(urls, ","))
	var k *testsink.Kafka
	if !flaky {
		if k, err = testsink.StartKafka("", "flashsale.events"); err != nil {
			return nil, 0, err
		}
		defer k.Stop()
		env, names = append(env, "FLASHSALE_EVENTS_KAFKA_BROKERS="+k.Addr()), append(names, "kafka")
	}
	last, err := sequenceAll(ctx, s)
	if err != nil {
		return nil, 0, err
	}
	for _, name := range names {
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
	reaper, err := s.StartReaper(env...)
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
	var arrivals *kafkaArrivals
	if k != nil {
		var stopConsumer func()
		if arrivals, stopConsumer, err = consumeArrivals(k.Addr()); err != nil {
			return nil, 0, err
		}
		defer stopConsumer()
	}

	path := "/v1/vouchers/" + strconv.FormatInt(v, 10) + "/orders"
	res := Drive(Load{Addr: host, Conns: latencyConns, Duration: latencyFor, Rate: rate, MaxRequests: n,
		Next: func(i int64) []byte { return Request(host, path, tokens[i]) }})
	admitted := int(res.Status[202])
	perS := float64(admitted) / res.Duration.Seconds()
	if admitted == 0 {
		return nil, 0, errors.New("latency: no claim admitted")
	}
	if err := wait.Until(ctx, 3*time.Minute, "every sink had every event of the sale", func() (bool, string) {
		var got []string
		done := true
		for _, h := range hooks {
			done = done && h.hook.Delivered() >= admitted
			got = append(got, fmt.Sprintf("%s %d", h.row, h.hook.Delivered()))
		}
		if arrivals != nil {
			done = done && arrivals.count() >= admitted
			got = append(got, fmt.Sprintf("kafka %d", arrivals.count()))
		}
		return done, fmt.Sprintf("%s of %d", strings.Join(got, ", "), admitted)
	}); err != nil {
		return nil, 0, err
	}
	var out []SinkLatency
	if arrivals != nil {
		kh := hdrhistogram.New(1, 600_000_000, 3)
		for _, lat := range arrivals.latencies() {
			_ = kh.RecordValue(max(lat.Microseconds(), 1))
		}
		out = append(out, latencyOf("kafka", kh))
	}
	for _, h := range hooks {
		hh := hdrhistogram.New(1, 600_000_000, 3)
		seen := map[string]bool{}
		twice := 0
		for _, d := range h.hook.Deliveries() {
			if seen[d.ID] {
				twice++
				continue
			}
			seen[d.ID] = true
			t, err := eventTime(d.Body)
			if err != nil {
				return nil, 0, err
			}
			_ = hh.RecordValue(max(d.At.Sub(t).Microseconds(), 1))
		}
		l := latencyOf(h.row, hh)
		l.Twice, l.RequestsPerEvent = twice, float64(h.hook.Requests())/float64(len(seen))
		out = append(out, l)
	}
	return out, perS, nil
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
	if len(x.Parts) > 0 {
		fmt.Fprintf(w, "\norder events: one sink relayed in %d parts by 1, 2 and 3 reapers (the same %d events; the reapers' CPU summed, their idle CPU taken off)\n",
			x.Parts[0].Parts, eventsAloneOrders)
		tw = tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
		fmt.Fprintln(tw, "sink\treapers\tevents\tseconds\tevents/s\treapers µs/event\t")
		for _, a := range x.Parts {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.0f\t%.1f\t\n", a.Sink, a.Reapers, a.Events, a.Seconds, a.PerSecond, a.ReaperUS)
		}
		tw.Flush()
	}
	fmt.Fprintf(w, "\norder events: commit to sink during a sale, open loop at %d claims/s for %s (%.0f admitted/s), 2 workers, a reaper relaying to both\n",
		latencyRate, latencyFor, x.SaleOrdersPerS)
	printLatency(w, x.Latency)
	if len(x.Flaky) > 0 {
		fmt.Fprintf(w, "\norder events: an endpoint failing 1 %% of first attempts beside a healthy one, open loop at %d claims/s for %s (%.0f admitted/s)\n",
			flakyRate, latencyFor, x.FlakyOrdersPerS)
		printLatency(w, x.Flaky)
	}
}

// printLatency prints rows of commit-to-sink times.
func printLatency(w io.Writer, rows []SinkLatency) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "sink\tevents\tp50\tp99\tmax\trequests an event\ttwice\t")
	for _, l := range rows {
		per := "-"
		if l.RequestsPerEvent > 0 {
			per = fmt.Sprintf("%.3f", l.RequestsPerEvent)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d\t\n", l.Sink, l.Events, l.P50.Round(time.Millisecond), l.P99.Round(time.Millisecond), l.Max.Round(time.Millisecond), per, l.Twice)
	}
	tw.Flush()
}
