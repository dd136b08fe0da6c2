package reaper

// The sequencer: the events each change wrote in its transaction (the
// outbox, pkg/db events.go) get their sequence here, once committed, in
// the order they were written: 1, 2, 3, ... with no gap, whichever reaper
// gives them (event_sequence's row lock takes them in turn). Events older
// than FLASHSALE_EVENTS_RETENTION are deleted, oldest sequence first.

import (
	"context"
	"time"
)

// sequenceRows: the rows of events sequenced in one transaction, by the
// sequencer and by a relay with nothing to send.
const sequenceRows = 100

// sequenceEvents sequences every committed event without a sequence, and
// deletes those past their retention.
func (r *Reaper) sequenceEvents(ctx context.Context, round *Round) error {
	for round.EventsSequenced < r.cfg.MaxPerRound {
		n, err := r.db.SequenceEvents(ctx, sequenceRows)
		round.EventsSequenced += n
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
	}
	waiting, oldest, err := r.db.EventBacklog(ctx)
	if err != nil {
		return err
	}
	r.metrics.eventsUnsequenced.Set(float64(waiting))
	age := 0.0
	if !oldest.IsZero() {
		age = max(time.Since(oldest).Seconds(), 0) // MySQL's clock wrote it: a real clock's age
	}
	r.metrics.eventsOldestAge.Set(age)
	for round.EventsDeleted < r.cfg.MaxPerRound {
		n, err := r.db.DeleteEventsBefore(ctx, time.Now().Add(-r.cfg.EventsRetention), 100)
		round.EventsDeleted += n
		if err != nil || n == 0 {
			return err
		}
	}
	return nil
}
