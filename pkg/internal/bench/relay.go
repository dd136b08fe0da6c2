package bench

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/internal/testsink"
	"github.com/flashsale/flashsale/pkg/persist"
)

// RelayRun is the drain with the events relayed: a reaper relaying to a
// webhook endpoint and a Kafka broker (kfake) while two workers drain,
// beside the same drain without a reaper just before it.
type RelayRun struct {
	Events int `json:"events"`
	// Without, With: the drain's orders/s without a reaper, and with one
	// sequencing and relaying to both sinks; Ratio = With / Without.
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
}

// relayRun measures the drain with the events relayed (RelayRun).
func relayRun(ctx context.Context, s *harness.Stack, cfg Config) (*RelayRun, error) {
	// What earlier rows wrote is sequenced first, so the sinks, new to the
	// reaper, start after it and take only this row's events.
	for {
		n, err := s.DB.SequenceEvents(ctx, 1000)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			break
		}
	}
	hook := testsink.StartReceiver()
	defer hook.Close()
	kafka, err := testsink.StartKafka("", "flashsale.events") // in memory: a real broker's disk is elsewhere
	if err != nil {
		return nil, err
	}
	defer kafka.Stop()
	r := &RelayRun{Events: cfg.DrainOrders}
	without, _, err := drain(ctx, s, "units", 1, 2, persist.BatchSizeDefault, cfg.DrainOrders, "")
	if err != nil {
		return nil, err
	}
	r.Without = without.PerSecond
	for {
		if n, err := s.DB.SequenceEvents(ctx, 1000); err != nil || n == 0 {
			if err != nil {
				return nil, err
			}
			break
		}
	}
	reaper, err := s.StartReaper("FLASHSALE_CONSUMER_NAME=bench-relay", "FLASHSALE_EVENTS_WEBHOOK_URLS="+hook.URL,
		"FLASHSALE_EVENTS_WEBHOOK_SECRET="+testsink.Secret, "FLASHSALE_EVENTS_KAFKA_BROKERS="+kafka.Addr())
	if err != nil {
		return nil, err
	}
	defer func() { _ = reaper.Stop(30 * time.Second) }()
	if err := waitReady(reaper); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for { // both sinks held, at the last sequence
		states, err := s.DB.SinkStates(ctx)
		if err != nil {
			return nil, err
		}
		if len(states) == 2 {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("relay: the reaper holds %d of 2 sinks after 30 s", len(states))
		}
		time.Sleep(50 * time.Millisecond)
	}
	start := time.Now()
	if cfg.ProfileDir != "" {
		prof := profile(reaper.PprofURL, 5*time.Second, filepath.Join(cfg.ProfileDir, "reaper-relay.cpu.pprof"))
		defer func() { <-prof }()
	}
	with, _, err := drain(ctx, s, "units", 1, 2, persist.BatchSizeDefault, cfg.DrainOrders, "")
	if err != nil {
		return nil, err
	}
	drained := start.Add(time.Duration(with.Seconds * float64(time.Second)))
	r.With, r.Ratio = with.PerSecond, with.PerSecond/r.Without
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
				return nil, err
			}
			if n >= int64(cfg.DrainOrders) {
				kafkaDone = time.Now()
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("relay: webhook %d, kafka done %v of %d events 2 minutes after the drain", hook.Delivered(), !kafkaDone.IsZero(), cfg.DrainOrders)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.WebhookPerS = float64(cfg.DrainOrders) / hookDone.Sub(start).Seconds()
	r.KafkaPerS = float64(cfg.DrainOrders) / kafkaDone.Sub(start).Seconds()
	r.BacklogZeroAfter = max(maxTime(hookDone, kafkaDone).Sub(drained), 0)
	r.Duplicates = testsink.Duplicates(hook.Deliveries())
	cfg.logf("relay: drain %.0f orders/s without, %.0f with (%.0f %%); webhook %.0f events/s, kafka %.0f; backlog zero %s after the drain",
		r.Without, r.With, 100*r.Ratio, r.WebhookPerS, r.KafkaPerS, r.BacklogZeroAfter.Round(time.Millisecond))
	return r, nil
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

// printRelay writes the relay row.
func (r *Report) printRelay(w io.Writer) {
	x := r.Relay
	if x == nil {
		return
	}
	fmt.Fprintf(w, "\ndrain with events relayed (2 workers, a reaper, a webhook endpoint and kfake in the bench process): %d orders\n", x.Events)
	fmt.Fprintf(w, "  drain %.0f orders/s without a reaper, %.0f with (%.0f %%)\n", x.Without, x.With, 100*x.Ratio)
	fmt.Fprintf(w, "  relay: webhook %.0f events/s, kafka %.0f events/s; both sinks had every event %s after the drain's last order (webhook duplicates %d)\n",
		x.WebhookPerS, x.KafkaPerS, x.BacklogZeroAfter.Round(time.Millisecond), x.Duplicates)
}
