package event

// A laned sink's turn (a webhook endpoint's, Kafka's): the events after
// the sink's delivered_upto are read into its lanes, each order's events
// in one lane, in order, and every lane goes on its own. A lane whose
// head event fails backs off, its pause doubling per attempt from a
// second up to an hour (5 s for Kafka), and holds back only itself; the
// others keep sending. An event
// delivered is done; so is one recorded failed after
// FLASHSALE_EVENTS_WEBHOOK_RETRY_FOR. delivered_upto moves on to the
// last event below which every event is done, so a lane's deliveries are
// never sent again because another lane failed; only the next holder of
// the lease, after a crash or a lease lost, sends again what was done
// above delivered_upto.

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/backoff"
	"github.com/flashsale/flashsale/pkg/db"
)

const (
	// laneTurn bounds the events a lane sends in one turn (a turn waits
	// for its longest lane).
	laneTurn = 64
	// laneWindow bounds the events read and not yet done: a lane stuck
	// on one event lets the others run this far ahead of it.
	laneWindow = 4 * webhookBatch
)

// lane is one lane's events not yet done, and its retry state.
type lane struct {
	queue   []Event
	retryAt time.Time // the next attempt at queue[0] (zero: at once)
	retry   *backoff.Backoff
	failing time.Time // since when queue[0] has failed (zero: it has not)
}

// lanes is a laned sink's state while this relay holds it, from the
// delivered_upto it read (from).
type lanes struct {
	from    int64          // delivered_upto as recorded
	read    int64          // the last sequence read into the lanes
	done    map[int64]bool // done above from
	skip    [][2]int64     // ranges above from with no event to send (deleted, another part's)
	pending int            // events in the queues
	lanes   []lane
}

func newLanes(from int64, n int, retryMax time.Duration) *lanes {
	ls := &lanes{from: from, read: from, done: map[int64]bool{}, lanes: make([]lane, n)}
	for i := range ls.lanes {
		ls.lanes[i].retry = backoff.New(relayRetryFirst, retryMax)
	}
	return ls
}

// skipRange records the events from to to as none to send, in a range
// of its own or the last one's.
func (ls *lanes) skipRange(from, to int64) {
	if n := len(ls.skip); n > 0 && ls.skip[n-1][1] == from-1 {
		ls.skip[n-1][1] = to
		return
	}
	ls.skip = append(ls.skip, [2]int64{from, to})
}

// laneResult is what one lane's sending did: which of the events it
// sent were delivered, and the first failure.
type laneResult struct {
	ok  []bool
	err error
}

// stepLanes is a turn of a laned sink held with state st; it returns the
// pause before the next turn.
func (rl *Relay) stepLanes(ctx context.Context, sink Laned, st db.SinkState) time.Duration {
	name, m := rl.name, rl.metrics
	if rl.ls == nil || rl.ls.from != st.DeliveredUpto {
		rl.ls = newLanes(st.DeliveredUpto, sink.Lanes(), rl.retry.Max) // a new holder, a redelivery: from the record
	}
	ls := rl.ls
	var read []db.OutboxEvent
	if ls.pending < laneWindow && rl.handOver.IsZero() { // a part handed over reads nothing more
		var err error
		// A part's events are about one in parts of those read.
		if read, err = rl.next(ctx, ls.read, min(rl.batch, laneWindow-ls.pending)*rl.parts); err != nil {
			rl.log.Warn("could not read events", zap.Error(err))
			return rl.retry.Next()
		}
		for _, e := range read {
			if e.Sequence > ls.read+1 { // deleted past the retention: nothing to send
				ls.skipRange(ls.read+1, e.Sequence-1)
			}
			ls.read = e.Sequence
			if PartOf(e, rl.parts) != rl.part {
				ls.skipRange(e.Sequence, e.Sequence) // another part's
				continue
			}
			ev := Of(rl.source, e)
			l := &ls.lanes[sink.Lane(ev)]
			l.queue = append(l.queue, ev)
			ls.pending++
		}
	}
	if (ls.pending == 0 && len(read) == 0) || !time.Now().Before(rl.gaugesAt) {
		// The oldest undelivered may wait in a lane, not among those just
		// read: gauges reads it after delivered_upto.
		rl.gauges(ctx, st, nil)
		rl.gaugesAt = time.Now().Add(time.Second)
	}
	if ls.pending == 0 {
		if !rl.advanceLanes(ctx, ls) || len(read) > 0 { // another part's events only: read on
			return 0
		}
		return rl.idle()
	}
	rl.poll = relayPollMin

	// Every lane due sends, at once; the turn ends with the last.
	now := time.Now()
	results := make([]laneResult, len(ls.lanes))
	sctx, cancel := rl.sendContext(ctx)
	var wg sync.WaitGroup
	for i := range ls.lanes {
		l := &ls.lanes[i]
		if len(l.queue) == 0 || now.Before(l.retryAt) {
			continue
		}
		batch := l.queue[:min(len(l.queue), laneTurn)]
		wg.Go(func() {
			ok, err := sink.SendLane(sctx, batch)
			results[i] = laneResult{ok, err}
		})
	}
	wg.Wait()
	cancel()

	var gone error
	delivered := 0
	for i := range ls.lanes {
		l, r := &ls.lanes[i], results[i]
		sent := 0
		if len(r.ok) > 0 { // the delivered leave the queue; the others keep their order
			kept := l.queue[:0:0]
			for j, e := range l.queue {
				if j < len(r.ok) && r.ok[j] {
					ls.done[int64(e.Sequence)] = true
					sent++
					continue
				}
				kept = append(kept, e)
			}
			l.queue = kept
		}
		delivered += sent
		if sent > 0 {
			m.delivered.WithLabelValues(name).Add(float64(sent))
			ls.pending -= sent
			if r.ok[0] { // the head went: the lane is not stuck on it
				l.retry.Reset()
				l.retryAt, l.failing = time.Time{}, time.Time{}
			}
		}
		if r.err == nil {
			continue
		}
		if f, ok := errors.AsType[*Failure](r.err); ok && f.Gone {
			gone = r.err
			continue
		}
		rl.laneFailed(ctx, ls, l, r.err)
	}
	if gone != nil {
		m.failures.WithLabelValues(name, "gone").Inc()
		rl.stopped(ctx, gone)
		return relayPoll
	}
	if !rl.advanceLanes(ctx, ls) {
		return 0
	}
	// The next turn: at once after a delivery (more may have come), else
	// at the first retry, and within a poll in any case (new events for
	// the lanes not waiting).
	if delivered > 0 {
		return 0
	}
	wait := relayPoll
	for i := range ls.lanes {
		if l := &ls.lanes[i]; len(l.queue) > 0 {
			wait = min(wait, max(time.Until(l.retryAt), 0))
		}
	}
	return wait
}

// laneFailed handles the failure err of lane l's head event: it backs
// the lane off, or records the event failed and moves the lane on once
// it has failed for retryFor.
func (rl *Relay) laneFailed(ctx context.Context, ls *lanes, l *lane, err error) {
	name, e := rl.name, l.queue[0]
	cause := CauseOf(err)
	rl.metrics.failures.WithLabelValues(name, cause).Inc()
	now := time.Now()
	if l.failing.IsZero() {
		l.failing = now
	}
	// The sink's row says it is retrying (reaper events, the console).
	if _, ferr := rl.store.SinkFailing(ctx, name, rl.owner, err.Error()); ferr != nil {
		rl.log.Warn("could not record the failure", zap.Error(ferr))
	}
	log := rl.log.With(zap.String("event_id", e.ID), zap.Int64("sequence", int64(e.Sequence)), zap.String("cause", cause), zap.Error(err))
	if failing := now.Sub(l.failing); rl.retryFor > 0 && failing >= rl.retryFor {
		log.Error("event failed for this endpoint: not delivered within FLASHSALE_EVENTS_WEBHOOK_RETRY_FOR", zap.Duration("failing_for", failing))
		if ferr := rl.store.FailSinkEvent(ctx, name, rl.owner, int64(e.Sequence), err.Error()); ferr != nil {
			log.Warn("could not record the event failed", zap.NamedError("record_error", ferr))
			l.retryAt = now.Add(l.retry.Next())
			return
		}
		rl.metrics.givenUp.WithLabelValues(name).Inc()
		ls.done[int64(e.Sequence)] = true
		l.queue, ls.pending = l.queue[1:], ls.pending-1
		l.retry.Reset()
		l.retryAt, l.failing = time.Time{}, time.Time{}
		return
	}
	wait := l.retry.Next()
	l.retryAt = now.Add(wait)
	log.Warn("event not delivered: retrying", zap.Duration("failing_for", now.Sub(l.failing)), zap.Duration("retry_in", wait))
}

// advanceLanes moves delivered_upto past every event done from it on;
// false when the sink changed under it (a redelivery, a lease taken):
// the next turn reads it again.
func (rl *Relay) advanceLanes(ctx context.Context, ls *lanes) bool {
	upto := ls.from
	for {
		if ls.done[upto+1] {
			upto++
			delete(ls.done, upto)
			continue
		}
		if len(ls.skip) > 0 && ls.skip[0][0] == upto+1 {
			upto, ls.skip = ls.skip[0][1], ls.skip[1:]
			continue
		}
		break
	}
	if upto == ls.from {
		return true
	}
	moved, err := rl.store.AdvanceSink(ctx, rl.name, rl.owner, ls.from, upto)
	switch {
	case err != nil:
		rl.log.Warn("could not record the events delivered", zap.Int64("upto", upto), zap.Error(err))
		rl.renewAt, rl.ls = time.Time{}, nil
		return false
	case !moved: // redelivered by an operator, or taken over: read it again
		rl.renewAt, rl.ls = time.Time{}, nil
		return false
	}
	ls.from = upto
	rl.st.DeliveredUpto, rl.st.FailingSince, rl.st.Attempts = upto, nil, 0
	return true
}
