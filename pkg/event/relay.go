package event

// The relay: each sink has a loop of its own (Relay.Run), so a slow or
// dead one holds back no other. Its states, one turn (step) at a time:
//
//   - not held: another process holds the sink's lease in event_sinks;
//     look again when that lease may have ended.
//   - sending: held, events after the sink's delivered_upto: send up to
//     a batch in sequence order, move delivered_upto on past those
//     delivered.
//   - idle: held, nothing after delivered_upto: sequence what has
//     committed, else wait a poll (20 ms doubling to 200 ms).
//   - retrying: the event after delivered_upto failed: back off with
//     jitter. A webhook endpoint is laned (lanes.go): a lane backs off
//     on its own and the others go on; an event it has not taken within
//     FLASHSALE_EVENTS_WEBHOOK_RETRY_FOR is recorded failed (its lane
//     moves past it).
//   - stopped: the endpoint answered 410 Gone: it takes nothing until an
//     operator redelivers (reaper events redeliver).
//
// Each turn that (re)reads the lease also sends again the failed events
// an operator asked for (redeliver --failed). While the holder lives
// each event goes out once per sink; after a crash, or a lease lost, the
// next holder sends again what was not recorded (at least once: the
// same id, sequence and body).
//
// A sink relayed in parts (FLASHSALE_EVENTS_RELAY_PARTS) has a loop a
// part in every reaper, each part's events those of its orders (PartOf)
// under a lease of its own (db.HoldPart); the live reapers share the
// parts evenly, each keeping what it holds. A part whose reaper is told
// to hand it over (another reaper came, or it holds more than its share)
// reads nothing more, finishes what it read (at most a lease) and gives
// its lease up; the next holder starts at its place.

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/backoff"
	"github.com/flashsale/flashsale/pkg/db"
)

// Relay timings (the lease is FLASHSALE_EVENTS_RELAY_LEASE, at least
// three webhook timeouts): the pause of a relay with nothing to send,
// the first retry's pause.
const (
	// A relay that finds nothing to send looks again after relayPollMin,
	// the pause doubling up to relayPoll while nothing comes: during a
	// sale, when the workers commit every few tens of milliseconds, an
	// event waits about that long for its relay, and an idle relay costs
	// a read every relayPoll.
	relayPollMin    = 20 * time.Millisecond
	relayPoll       = 200 * time.Millisecond
	relayRetryFirst = time.Second
	// A webhook endpoint's retries back off up to an hour; Kafka's (the
	// client retries within a send besides) up to 5 s.
	webhookRetryMax = time.Hour
	kafkaRetryMax   = 5 * time.Second
	// Events per send: Kafka's batch; a webhook endpoint's, over its
	// lanes (a turn waits for its longest lane: at 64 a lane, about 80 %
	// of the lanes' time is spent sending).
	kafkaBatch   = 1000
	webhookBatch = 64 * WebhookLanes
)

// Relay is one sink's loop, or one part's of a sink relayed in parts.
type Relay struct {
	store   *db.Store
	metrics *Metrics
	source  string
	sink    Sink
	// name is the part's row in event_sinks (the sink's name when it is
	// relayed whole), its metrics' and log lines' sink; part of parts.
	name        string
	part, parts int
	// owner is the process's lease token: the reaper's name and a random
	// suffix, so two reapers of one name (two on a host started alike)
	// never both hold a part.
	owner    string
	batch    int
	retryFor time.Duration // 0: retried until delivered
	retry    *backoff.Backoff
	lease    time.Duration
	log      *zap.Logger
	// The sink as last read, held or not; read again (and the lease
	// renewed) at renewAt, a third into the lease, or at once after
	// anything but a delivery changed it. heldUntil: when the lease
	// ends at the latest, by this process's clock (the time before the
	// renewal was asked, plus the lease): every send ends before it.
	st        db.SinkState
	held      bool
	renewAt   time.Time
	heldUntil time.Time
	// gaugesAt: when the backlog gauges are set next.
	gaugesAt time.Time
	// poll: the pause after a turn with nothing to send (relayPollMin to
	// relayPoll).
	poll time.Duration
	// ls is a laned sink's lanes while this relay holds it (lanes.go).
	ls *lanes
	// handOver: when this relay was told to hand the part over (zero:
	// it was not); waiting: the reaper holding the rows of another
	// number of parts, as last logged.
	handOver time.Time
	waiting  string
	// relayerAt: when this process is renewed next as a relayer of the
	// sink (event_relayers).
	relayerAt time.Time
}

// leaseToken is a lease owner unique to this process: name and 8
// random hex digits.
func leaseToken(name string) string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on Linux
	return name + "/" + hex.EncodeToString(b[:])
}

// Relays are the loops relaying cfg's sinks for the process named name
// (its lease token adds a random suffix): one a part of each sink
// (cfg.RelayParts), each with a sink client of its own, so that one
// part's failing send leaves the others' alone.
func Relays(store *db.Store, cfg Config, name string, m *Metrics, log *zap.Logger) ([]*Relay, error) {
	owner := leaseToken(name)
	parts := max(cfg.RelayParts, 1)
	var out []*Relay
	for part := range parts {
		sinks, err := Sinks(cfg)
		if err != nil {
			for _, rl := range out {
				rl.sink.Close()
			}
			return nil, err
		}
		for _, s := range sinks {
			out = append(out, newRelay(store, s, cfg, owner, part, parts, m, log))
		}
	}
	return out, nil
}

func newRelay(store *db.Store, s Sink, cfg Config, owner string, part, parts int, m *Metrics, log *zap.Logger) *Relay {
	name := db.PartName(s.Name(), part, parts)
	rl := &Relay{store: store, metrics: m, source: cfg.Source, sink: s, name: name, part: part, parts: parts, owner: owner, batch: kafkaBatch,
		retry: backoff.New(relayRetryFirst, kafkaRetryMax), lease: max(cmp.Or(cfg.RelayLease, RelayLeaseDefault), 3*cfg.WebhookTimeout),
		log: log.With(zap.String("sink", name))}
	if _, ok := s.(*Webhook); ok {
		rl.batch, rl.retryFor, rl.retry = webhookBatch, cfg.WebhookRetryFor, backoff.New(relayRetryFirst, webhookRetryMax)
	}
	for _, c := range Causes {
		m.failures.WithLabelValues(name, c)
	}
	m.delivered.WithLabelValues(name)
	m.givenUp.WithLabelValues(name)
	return rl
}

// Close closes the relay's sink client.
func (rl *Relay) Close() { rl.sink.Close() }

// Run relays until ctx ends, then gives the lease up.
func (rl *Relay) Run(ctx context.Context) {
	rl.log.Info("relaying order events", zap.Int("part", rl.part+1), zap.Int("parts", rl.parts))
	for ctx.Err() == nil {
		wait := rl.step(ctx)
		if rl.sleep(ctx, wait) != nil {
			break
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := errors.Join(rl.store.LeaveRelay(rctx, rl.sink.Name(), rl.owner), rl.store.ReleaseSink(rctx, rl.name, rl.owner)); err != nil {
		rl.log.Warn("could not give up the sink's lease", zap.Error(err))
	}
}

// sleep waits d, renewing the lease meanwhile so a backoff is not taken
// over by another reaper retrying at once.
func (rl *Relay) sleep(ctx context.Context, d time.Duration) error {
	for d > 0 {
		step := min(d, rl.lease/3)
		if err := backoff.Sleep(ctx, step); err != nil {
			return err
		}
		d -= step
		if d > 0 {
			asked := time.Now()
			h, err := rl.hold(ctx)
			if err != nil || !h.Held || !h.Assigned {
				rl.renewAt = time.Time{}
				return nil // the next step says what failed, or who holds it
			}
			rl.heldUntil = asked.Add(rl.lease)
		}
	}
	return nil
}

// hold takes or renews the part's lease (db.HoldPart), renewing this
// process as a relayer of the sink every third of a lease (an idle relay
// looks at its part five times a second), and says why not when it
// cannot.
func (rl *Relay) hold(ctx context.Context) (db.PartHold, error) {
	now := time.Now()
	renew := !now.Before(rl.relayerAt)
	h, err := rl.store.HoldPart(ctx, rl.sink.Name(), rl.part, rl.parts, rl.owner, rl.lease, renew)
	if err != nil {
		return h, err
	}
	if renew {
		rl.relayerAt = now.Add(rl.lease / 3)
	}
	if h.Waiting != rl.waiting {
		if rl.waiting = h.Waiting; h.Waiting != "" {
			rl.log.Warn("the sink is relayed in another number of parts by a reaper with another FLASHSALE_EVENTS_RELAY_PARTS: waiting for its lease to end",
				zap.String("holder", h.Waiting), zap.Int("parts", rl.parts))
		}
	}
	switch {
	case h.Held && !h.Assigned && rl.handOver.IsZero():
		rl.handOver = time.Now()
		rl.log.Info("handing the part over: another reaper relays it now", zap.Int("relayers", h.Relayers))
	case h.Assigned || !h.Held:
		rl.handOver = time.Time{}
	}
	return h, nil
}

// handedOver gives the part up once it has handed it over: at once
// unless a laned sink's events read are still in its lanes, and in any
// case a lease after it was told to (what it delivered past its place
// then is sent again by the next holder). It reports whether it gave it
// up.
func (rl *Relay) handedOver(ctx context.Context) bool {
	if rl.handOver.IsZero() || (rl.ls != nil && rl.ls.pending > 0 && time.Since(rl.handOver) < rl.lease) {
		return false
	}
	if err := rl.store.ReleaseSink(ctx, rl.name, rl.owner); err != nil {
		rl.log.Warn("could not give up the sink's lease", zap.Error(err))
	}
	rl.log.Info("part handed over")
	rl.held, rl.ls, rl.handOver, rl.renewAt = false, nil, time.Time{}, time.Time{}
	return true
}

// step is one turn of the loop: hold the lease, redeliver what an
// operator asked for, send the next events; it returns the pause before
// the next turn.
func (rl *Relay) step(ctx context.Context) time.Duration {
	name, owner, m := rl.name, rl.owner, rl.metrics
	if !time.Now().Before(rl.renewAt) {
		asked := time.Now()
		h, err := rl.hold(ctx)
		if err != nil {
			rl.held = false
			rl.log.Warn("could not hold the sink's lease", zap.Error(err))
			return rl.retry.Next()
		}
		rl.st, rl.held, rl.renewAt, rl.heldUntil = h.State, h.Held, asked.Add(rl.lease/3), asked.Add(rl.lease)
		if h.Assigned && !h.Held { // its last holder hands it over, or its lease ends: look again soon
			rl.renewAt = asked.Add(min(time.Second, rl.lease/3))
		}
		if rl.held && rl.handOver.IsZero() {
			if err := rl.redeliverFailed(ctx); err != nil {
				rl.log.Warn("could not redeliver failed events", zap.Error(err))
			}
		}
	}
	if rl.held && rl.handedOver(ctx) {
		return 0
	}
	if !rl.held { // another reaper relays it; its gauges say how it goes
		rl.ls = nil
		m.undelivered.WithLabelValues(name).Set(0)
		m.oldestAge.WithLabelValues(name).Set(0)
		return time.Until(rl.renewAt)
	}
	st := rl.st
	if laned, ok := rl.sink.(Laned); ok && st.Disabled == "" {
		return rl.stepLanes(ctx, laned, st)
	}
	rl.ls = nil
	var events []db.OutboxEvent
	if st.Disabled == "" {
		var err error
		if events, err = rl.next(ctx, st.DeliveredUpto, rl.batch); err != nil {
			rl.log.Warn("could not read events", zap.Error(err))
			return rl.retry.Next()
		}
	}
	if len(events) == 0 || !time.Now().Before(rl.gaugesAt) {
		rl.gauges(ctx, st, events)
		rl.gaugesAt = time.Now().Add(time.Second)
	}
	if len(events) == 0 {
		return rl.idle()
	}
	rl.poll = relayPollMin
	out := make([]Event, len(events))
	for i, e := range events {
		out[i] = Of(rl.source, e)
	}
	sctx, cancel := rl.sendContext(ctx)
	n, sendErr := rl.sink.Send(sctx, out)
	cancel()
	if n > 0 {
		m.delivered.WithLabelValues(name).Add(float64(n))
		upto := int64(out[n-1].Sequence)
		moved, err := rl.store.AdvanceSink(ctx, name, owner, st.DeliveredUpto, upto)
		if err != nil {
			rl.log.Warn("could not record the events delivered", zap.Int64("upto", upto), zap.Error(err))
			rl.renewAt = time.Time{}
			return rl.retry.Next()
		}
		if !moved { // redelivered by an operator, or taken over: read it again
			rl.renewAt = time.Time{}
			return 0
		}
		rl.st.DeliveredUpto, rl.st.FailingSince, rl.st.Attempts = upto, nil, 0
	}
	if sendErr == nil {
		rl.retry.Reset()
		return 0
	}
	return rl.failed(ctx, out[n], sendErr)
}

// idle is the pause after a turn with nothing to send: relayPollMin,
// doubling up to relayPoll while nothing comes; the sink is read again
// within a poll, to see what changed.
func (rl *Relay) idle() time.Duration {
	wait := max(rl.poll, relayPollMin)
	rl.poll = min(2*wait, relayPoll)
	if soon := time.Now().Add(relayPoll); soon.Before(rl.renewAt) {
		rl.renewAt = soon
	}
	return wait
}

// sendContext bounds a send: half a lease, and never past the lease,
// less a margin for the clocks, so a sender whose lease lapsed has
// stopped before another reaper can take the sink (the Kafka client's
// own retries end sooner still: KafkaDeliveryTimeout).
func (rl *Relay) sendContext(ctx context.Context) (context.Context, context.CancelFunc) {
	end := time.Now().Add(rl.lease / 2)
	if fence := rl.heldUntil.Add(-rl.lease / 10); fence.Before(end) {
		end = fence
	}
	return context.WithDeadline(ctx, end)
}

// next reads the events to send after sequence after. With none, it
// sequences what has committed since the sequencer's last round (every
// FLASHSALE_REAPER_EVENTS_INTERVAL) and reads again: an event leaves
// within a poll of its commit, not within a round.
func (rl *Relay) next(ctx context.Context, after int64, limit int) ([]db.OutboxEvent, error) {
	events, err := rl.store.Events(ctx, after, limit)
	if err != nil || len(events) > 0 {
		return events, err
	}
	n, err := rl.store.SequenceEvents(ctx, SequenceRows)
	if err != nil || n == 0 {
		return nil, err
	}
	rl.metrics.sequenced.Add(float64(n))
	return rl.store.Events(ctx, after, limit)
}

// failed handles a failed delivery of e and returns the pause before
// the next attempt.
func (rl *Relay) failed(ctx context.Context, e Event, sendErr error) time.Duration {
	name, owner := rl.name, rl.owner
	rl.renewAt = time.Time{} // what follows changes the sink: read it again
	cause := CauseOf(sendErr)
	rl.metrics.failures.WithLabelValues(name, cause).Inc()
	log := rl.log.With(zap.String("event_id", e.ID), zap.Int64("sequence", int64(e.Sequence)), zap.String("cause", cause), zap.Error(sendErr))
	if f, ok := errors.AsType[*Failure](sendErr); ok && f.Gone {
		rl.stopped(ctx, sendErr)
		return relayPoll
	}
	failing, err := rl.store.SinkFailing(ctx, name, owner, sendErr.Error())
	if err != nil {
		log.Warn("could not record the failure", zap.NamedError("record_error", err))
		return rl.retry.Next()
	}
	if rl.retryFor > 0 && failing >= rl.retryFor {
		log.Error("event failed for this endpoint: not delivered within FLASHSALE_EVENTS_WEBHOOK_RETRY_FOR", zap.Duration("failing_for", failing))
		if err := rl.store.GiveUpSinkEvent(ctx, name, owner, int64(e.Sequence), sendErr.Error()); err != nil {
			log.Warn("could not record the event failed", zap.NamedError("record_error", err))
			return rl.retry.Next()
		}
		rl.metrics.givenUp.WithLabelValues(name).Inc()
		rl.retry.Reset()
		return 0
	}
	wait := rl.retry.Next()
	log.Warn("event not delivered: retrying", zap.Duration("failing_for", failing), zap.Duration("retry_in", wait))
	return wait
}

// stopped stops the sink: its endpoint answered 410 Gone (err), and it
// takes nothing until an operator redelivers.
func (rl *Relay) stopped(ctx context.Context, err error) {
	rl.renewAt, rl.ls = time.Time{}, nil
	rl.log.Error("the endpoint is gone (410): no more events go to it until reaper events redeliver", zap.String("cause", "gone"), zap.Error(err))
	if derr := rl.store.DisableSink(ctx, rl.name, rl.owner, err.Error()); derr != nil {
		rl.log.Warn("could not stop the sink", zap.Error(derr))
	}
}

// redeliverFailed sends again the events recorded failed that an
// operator asked for ("reaper events redeliver --failed"): the part's,
// when the sink is relayed in parts (failures are the sink's).
func (rl *Relay) redeliverFailed(ctx context.Context) error {
	sink := rl.sink.Name()
	seqs, err := rl.store.FailedToRedeliver(ctx, sink, rl.batch)
	if err != nil || len(seqs) == 0 {
		return err
	}
	for _, seq := range seqs {
		if !time.Now().Before(rl.renewAt) {
			return nil // the lease is renewed before the rest are sent
		}
		events, err := rl.store.Events(ctx, seq-1, 1)
		if err != nil {
			return err
		}
		if len(events) == 0 || events[0].Sequence != seq {
			if err := rl.store.Redelivered(ctx, sink, seq, false, "deleted past FLASHSALE_EVENTS_RETENTION"); err != nil {
				return err
			}
			continue
		}
		if PartOf(events[0], rl.parts) != rl.part {
			continue // another part's
		}
		sctx, cancel := rl.sendContext(ctx)
		_, sendErr := rl.sink.Send(sctx, []Event{Of(rl.source, events[0])})
		cancel()
		cause := ""
		if sendErr != nil {
			cause = sendErr.Error()
			rl.metrics.failures.WithLabelValues(rl.name, CauseOf(sendErr)).Inc()
		} else {
			rl.metrics.delivered.WithLabelValues(rl.name).Inc()
		}
		if err := rl.store.Redelivered(ctx, sink, seq, sendErr == nil, cause); err != nil {
			return err
		}
	}
	return nil
}

// gauges sets the sink's backlog gauges: the events after delivered_upto
// and the age of the first of them, whether the sink is sending,
// retrying or stopped (410): "reaper events" and the console read the
// same (db.SinkStates).
func (rl *Relay) gauges(ctx context.Context, st db.SinkState, next []db.OutboxEvent) {
	name := rl.name
	last, err := rl.store.LastSequence(ctx)
	if err != nil {
		return
	}
	rl.metrics.undelivered.WithLabelValues(name).Set(float64(max(last-st.DeliveredUpto, 0)))
	age := 0.0
	if len(next) > 0 {
		age = max(time.Since(next[0].OccurredAt).Seconds(), 0)
	} else if last > st.DeliveredUpto {
		oldest, err := rl.store.OldestAfter(ctx, st.DeliveredUpto)
		if err != nil {
			return
		}
		if oldest != nil {
			age = max(time.Since(*oldest).Seconds(), 0)
		}
	}
	rl.metrics.oldestAge.WithLabelValues(name).Set(age)
}

// PartOf is the part, from 0, of a sink relayed in parts parts that
// carries event e: by its order (a split's voucher), so each order's
// events are in one part, in order. The same in every reaper (a hash
// of the id, not a seed of the process's).
func PartOf(e db.OutboxEvent, parts int) int {
	if parts <= 1 {
		return 0
	}
	id := e.OrderID
	if e.Split != nil {
		id = e.VoucherID
	}
	// splitmix64's finalizer: consecutive ids spread over the parts.
	x := uint64(id)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return int(x % uint64(parts))
}
