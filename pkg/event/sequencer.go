package event

// The sequencer: the events each change wrote in its transaction (the
// outbox, pkg/db events.go) get their sequence here, once committed, in
// the order they were written: 1, 2, 3, ... with no gap, whichever
// process gives them (event_sequence's row lock takes them in turn).
// Events older than FLASHSALE_EVENTS_RETENTION are deleted, oldest
// sequence first. The reaper runs it as one of its services; a relay
// with nothing to send sequences too, so an event leaves within a poll
// of its commit.

import (
	"context"
	"time"

	"github.com/flashsale/flashsale/pkg/db"
)

// SequenceRows is the rows of events sequenced in one transaction, by the
// sequencer and by a relay with nothing to send.
const SequenceRows = 100

// SequenceAndExpire sequences every committed event without a sequence
// and deletes those written more than retention ago, each up to most
// events, and sets the sequencer's gauges.
func SequenceAndExpire(ctx context.Context, store *db.Store, m *Metrics, most int, retention time.Duration) (sequenced, deleted int, err error) {
	for sequenced < most {
		n, err := store.SequenceEvents(ctx, SequenceRows)
		sequenced += n
		m.sequenced.Add(float64(n))
		if err != nil {
			return sequenced, 0, err
		}
		if n == 0 {
			break
		}
	}
	waiting, oldest, err := store.EventBacklog(ctx)
	if err != nil {
		return sequenced, 0, err
	}
	m.unsequenced.Set(float64(waiting))
	age := 0.0
	if !oldest.IsZero() {
		age = max(time.Since(oldest).Seconds(), 0) // MySQL's clock wrote it: a real clock's age
	}
	m.oldestUnsequenced.Set(age)
	for deleted < most {
		n, err := store.DeleteEventsBefore(ctx, time.Now().Add(-retention), 100)
		deleted += n
		m.deleted.Add(float64(n))
		if err != nil || n == 0 {
			return sequenced, deleted, err
		}
	}
	return sequenced, deleted, nil
}
