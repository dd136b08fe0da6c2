package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/internal/testsink"
	"github.com/flashsale/flashsale/pkg/persist"
)

// relayPairs: alternated pairs of drains, without and with the relay.
const relayPairs = 2

// RelayRun is the drain with the events relayed: two workers drain
// beside a reaper that relays to a webhook endpoint and a Kafka broker
// (kfake), both in the bench process, against the same drain beside a
// reaper without a sink just before it; in alternated pairs.
type RelayRun struct {
	Events int         `json:"events"`
	Pairs  []RelayPair `json:"pairs"`
	Mean   RelayPair   `json:"mean"`
}

// RelayPair is one pair of drains.
type RelayPair struct {
	// Without, With: the drain's orders/s beside a reaper without a sink,
	// and beside one relaying to both sinks; Ratio = With / Without.
	Without float64 `json:"drain_without_orders_per_s"`
	With    float64 `json:"drain_with_orders_per_s"`
	Ratio   float64 `json:"ratio"`
	// WebhookPerS, KafkaPerS: events each sink took per second, from the
	// drain's start to its last event.
	WebhookPerS float64 `json:"webhook_events_per_s"`
	KafkaPerS   float64 `json:"kafka_events_per_s"`
	// BacklogZeroAfter: from the drain's last order in MySQL until both
	// sinks had every event.
	BacklogZeroAfter time.Duration `json:"backlog_zero_after_drain_ns"`
	Duplicates       int           `json:"webhook_duplicates"`
	// ReaperUS, EndpointsUS: CPU per event (to both sinks) of the reaper,
	// and of the bench process holding the endpoint and the broker, from
	// the drain's start until both sinks had every event.
	ReaperUS    float64 `json:"reaper_us_per_event"`
	EndpointsUS float64 `json:"endpoints_us_per_event"`
}

// relayRun measures the drain with the events relayed (RelayRun).
func relayRun(ctx context.Context, s *harness.Stack, cfg Config) (*RelayRun, error) {
	r := &RelayRun{Events: cfg.DrainOrders}
	for i := range relayPairs {
		p, err := relayPair(ctx, s, cfg, i)
		if err != nil {
			return nil, err
		}
		cfg.logf("relay, pair %d: drain %.0f orders/s without a sink, %.0f with (%.0f %%); webhook %.0f events/s, kafka %.0f; backlog zero %s after the drain; reaper %.1f µs an event, endpoints %.1f",
			i+1, p.Without, p.With, 100*p.Ratio, p.WebhookPerS, p.KafkaPerS, p.BacklogZeroAfter.Round(time.Millisecond), p.ReaperUS, p.EndpointsUS)
		r.Pairs = append(r.Pairs, p)
	}
	n := float64(len(r.Pairs))
	for _, p := range r.Pairs {
		r.Mean.Without += p.Without / n
		r.Mean.With += p.With / n
		r.Mean.Ratio += p.Ratio / n
		r.Mean.WebhookPerS += p.WebhookPerS / n
		r.Mean.KafkaPerS += p.KafkaPerS / n
		r.Mean.BacklogZeroAfter += time.Duration(float64(p.BacklogZeroAfter) / n)
		r.Mean.Duplicates += p.Duplicates
		r.Mean.ReaperUS += p.ReaperUS / n
		r.Mean.EndpointsUS += p.EndpointsUS / n
	}
	return r, nil
}

// sequenceAll sequences every committed event, so the sinks, which
// start at the last sequence, take only what comes after.
func sequenceAll(ctx context.Context, s *harness.Stack) (int64, error) {
	for {
		n, err := s.DB.SequenceEvents(ctx, 1000)
		if err != nil {
			return 0, err
		}
		if n == 0 {
			return s.DB.LastSequence(ctx)
		}
	}
}

// relayPair is drain i without a sink, then with both.
func relayPair(ctx context.Context, s *harness.Stack, cfg Config, i int) (RelayPair, error) {
	var p RelayPair
	if _, err := sequenceAll(ctx, s); err != nil {
		return p, err
	}
	plain, err := s.StartReaper(fmt.Sprintf("FLASHSALE_CONSUMER_NAME=bench-nosink-%d", i))
	if err != nil {
		return p, err
	}
	defer func() { _ = plain.Stop(30 * time.Second) }()
	if err := waitReady(plain); err != nil {
		return p, err
	}
	without, _, err := drain(ctx, s, "units", 1, 2, persist.BatchSizeDefault, cfg.DrainOrders, "")
	if err != nil {
		return p, err
	}
	if err := plain.Stop(30 * time.Second); err != nil {
		return p, err
	}
	p.Without = without.PerSecond

	hook := testsink.StartReceiver() // a new endpoint: a new sink, from the last sequence
	defer hook.Close()
	kafka, err := testsink.StartKafka("", "flashsale.events") // in memory: a real broker's disk is elsewhere
	if err != nil {
		return p, err
	}
	defer kafka.Stop()
	last, err := sequenceAll(ctx, s)
	if err != nil {
		return p, err
	}
	if _, _, err := s.DB.RedeliverSink(ctx, "kafka", last); err != nil && !errors.Is(err, db.ErrNoSink) { // the last pair's
		return p, err
	}
	relayer := fmt.Sprintf("bench-relay-%d", i)
	reaper, err := s.StartReaper("FLASHSALE_CONSUMER_NAME="+relayer, "FLASHSALE_EVENTS_WEBHOOK_URLS="+hook.URL,
		"FLASHSALE_EVENTS_WEBHOOK_SECRET="+testsink.Secret, "FLASHSALE_EVENTS_KAFKA_BROKERS="+kafka.Addr())
	if err != nil {
		return p, err
	}
	defer func() { _ = reaper.Stop(30 * time.Second) }()
	if err := waitReady(reaper); err != nil {
		return p, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for { // both sinks held by this reaper
		states, err := s.DB.SinkStates(ctx)
		if err != nil {
			return p, err
		}
		held := 0
		for _, st := range states {
			if strings.HasPrefix(st.Owner, relayer+"/") && (st.Name == "kafka" || strings.HasSuffix(st.Name, hook.URL)) {
				held++
			}
		}
		if held == 2 {
			break
		}
		if time.Now().After(deadline) {
			return p, fmt.Errorf("relay: the reaper holds %d of 2 sinks after 30 s", held)
		}
		time.Sleep(50 * time.Millisecond)
	}
	reaper0, err := procCPU(reaper.Pid())
	if err != nil {
		return p, err
	}
	self0 := selfCPU()
	start := time.Now()
	if cfg.ProfileDir != "" && i == 0 {
		prof := profile(reaper.PprofURL, 15*time.Second, filepath.Join(cfg.ProfileDir, "reaper-relay.cpu.pprof"))
		defer func() { <-prof }()
	}
	with, _, err := drain(ctx, s, "units", 1, 2, persist.BatchSizeDefault, cfg.DrainOrders, "")
	if err != nil {
		return p, err
	}
	drained := start.Add(time.Duration(with.Seconds * float64(time.Second)))
	p.With, p.Ratio = with.PerSecond, with.PerSecond/p.Without
	var hookDone, kafkaDone, lastKafka time.Time
	deadline = time.Now().Add(2 * time.Minute)
	for hookDone.IsZero() || kafkaDone.IsZero() {
		if hookDone.IsZero() && hook.Delivered() >= cfg.DrainOrders {
			hookDone = time.Now()
		}
		if kafkaDone.IsZero() && time.Since(lastKafka) >= 250*time.Millisecond { // a client a poll: not too often
			lastKafka = time.Now()
			n, err := kafka.Records(ctx)
			if err != nil {
				return p, err
			}
			if n >= int64(cfg.DrainOrders) {
				kafkaDone = time.Now()
			}
		}
		if time.Now().After(deadline) {
			return p, fmt.Errorf("relay: webhook %d, kafka done %v of %d events 2 minutes after the drain", hook.Delivered(), !kafkaDone.IsZero(), cfg.DrainOrders)
		}
		time.Sleep(20 * time.Millisecond)
	}
	reaper1, err := procCPU(reaper.Pid())
	if err != nil {
		return p, err
	}
	p.ReaperUS = float64((reaper1 - reaper0).Microseconds()) / float64(cfg.DrainOrders)
	p.EndpointsUS = float64((selfCPU() - self0).Microseconds()) / float64(cfg.DrainOrders)
	p.WebhookPerS = float64(cfg.DrainOrders) / hookDone.Sub(start).Seconds()
	p.KafkaPerS = float64(cfg.DrainOrders) / kafkaDone.Sub(start).Seconds()
	p.BacklogZeroAfter = max(maxTime(hookDone, kafkaDone).Sub(drained), 0)
	p.Duplicates = testsink.Duplicates(hook.Deliveries())
	return p, nil
}

// selfCPU is the CPU time this process has used (user and system).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func maxTime(ts ...time.Time) time.Time {
	var m time.Time
	for _, t := range ts {
		if t.After(m) {
			m = t
		}
	}
	return m
}

// printRelay writes the relay rows.
func (r *Report) printRelay(w io.Writer) {
	x := r.Relay
	if x == nil {
		return
	}
	fmt.Fprintf(w, "\ndrain with events relayed (2 workers; a reaper without a sink, then one relaying to a webhook endpoint and kfake, both in the bench process): %d orders, %d alternated pairs\n", x.Events, len(x.Pairs))
	for i, p := range append(x.Pairs, x.Mean) {
		name := fmt.Sprintf("pair %d", i+1)
		if i == len(x.Pairs) {
			name = "mean"
		}
		fmt.Fprintf(w, "  %-6s drain %.0f orders/s without a sink, %.0f with (%.0f %%); webhook %.0f events/s, kafka %.0f; both sinks whole %s after the drain; CPU an event: reaper %.1f µs, endpoint and broker %.1f µs\n",
			name, p.Without, p.With, 100*p.Ratio, p.WebhookPerS, p.KafkaPerS, p.BacklogZeroAfter.Round(time.Millisecond), p.ReaperUS, p.EndpointsUS)
	}
}
