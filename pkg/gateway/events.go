package gateway

// The events API: the order events (pkg/event) in their sequence, for a
// consumer to catch up, backfill or replay (docs/EVENTS.md).

import (
	"net/http"
	"strconv"
	"time"

	"github.com/flashsale/flashsale/pkg/event"
)

// Bounds of a page of events.
const (
	eventsPageDefault = 100
	eventsPageMax     = 1000
)

// listEvents: GET /admin/v1/events?after=SEQUENCE&limit=N → {"events":
// [...], "next": "SEQUENCE"}: the kept events after after, in sequence
// order, at most limit; next is the last one's sequence (after itself
// when there is none yet), to pass as after for the page that follows.
// An after before the first kept event starts at it and the answer says
// so ("first_kept": the events between were deleted past the
// retention); an after past the last event published is refused
// (after_past_last), not answered as if caught up.
func (g *Gateway) listEvents(w http.ResponseWriter, r *http.Request) {
	if !g.eventsReader(w, r) {
		return
	}
	limit, after, err := pageOf(r, eventsPageDefault, eventsPageMax, "after must be an event's sequence (a whole number, 0 for the first kept)")
	if err != nil {
		g.fail(w, r, err)
		return
	}
	rows, err := g.db.Events(r.Context(), after, int(limit))
	if err != nil {
		g.fail(w, r, err)
		return
	}
	if len(rows) == 0 { // caught up, or after is past the last: one read tells
		last, err := g.db.LastSequence(r.Context())
		if err != nil {
			g.fail(w, r, err)
			return
		}
		if after > last {
			g.fail(w, r, badRequest("after_past_last", "after "+strconv.FormatInt(after, 10)+" is past the last event published, "+
				strconv.FormatInt(last, 10)+": pass the next of a page this gateway answered, or 0"))
			return
		}
	}
	out := struct {
		Events    []event.Event `json:"events"`
		Next      string        `json:"next"`
		FirstKept string        `json:"first_kept,omitempty"`
	}{Events: make([]event.Event, 0, len(rows)), Next: event.FormatSequence(after)}
	if len(rows) > 0 && rows[0].Sequence > after+1 {
		// The events between were deleted: say where the kept ones begin.
		out.FirstKept = event.FormatSequence(rows[0].Sequence)
	}
	for _, e := range rows {
		ev := event.Of(g.cfg.EventsSource, e)
		out.Events = append(out.Events, ev)
		out.Next = ev.Sequence
	}
	writeJSON(w, http.StatusOK, out)
}

// listSinks: GET /admin/v1/events/sinks → {"published_up_to": N,
// "sinks": [...]}: where each sink the reapers relay to stands (the
// console's sinks row; "reaper events" says the same).
func (g *Gateway) listSinks(w http.ResponseWriter, r *http.Request) {
	if !g.eventsReader(w, r) {
		return
	}
	last, err := g.db.LastSequence(r.Context())
	if err != nil {
		g.fail(w, r, err)
		return
	}
	states, err := g.db.SinkStates(r.Context())
	if err != nil {
		g.fail(w, r, err)
		return
	}
	out := struct {
		Published int64              `json:"published_up_to"`
		Sinks     []event.SinkStatus `json:"sinks"`
	}{last, make([]event.SinkStatus, 0, len(states))}
	for _, st := range states {
		out.Sinks = append(out.Sinks, event.StatusOf(st, last, time.Now()))
	}
	writeJSON(w, http.StatusOK, out)
}
