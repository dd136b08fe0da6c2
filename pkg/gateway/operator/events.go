package operator

// The events API: the order events (pkg/event) in their sequence, for a
// consumer to catch up, backfill or replay (docs/EVENTS.md).

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/event"
	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
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
// retention; with none kept, the next to be published, and next the
// last published); an after past the last event published is refused
// (after_past_last): neither is answered as if caught up.
//
// voucher_id=ID and type=order.STATUS keep the page's events of that
// voucher, of that type: the page is read over the whole sequence as
// without them, so next moves on even when none of its events is kept
// (a filtered page may hold fewer than limit events, or none). Any other
// parameter is refused (unknown_field): a misspelt filter would answer
// every event.
func (a *API) listEvents(w http.ResponseWriter, r *http.Request) {
	if !a.EventsReader(w, r) {
		return
	}
	limit, after, err := httpapi.PageOf(r, eventsPageDefault, eventsPageMax, "after must be an event's sequence (a whole number, 0 for the first kept)")
	if err == nil {
		err = eventsQuery(r)
	}
	var voucherID int64
	if err == nil {
		voucherID, err = httpapi.VoucherParam(r)
	}
	if err != nil {
		a.Fail(w, r, err)
		return
	}
	typ := r.URL.Query().Get("type")
	rows, err := a.eventsDB().Events(r.Context(), after, int(limit))
	if err != nil {
		a.Fail(w, r, err)
		return
	}
	out := struct {
		Events    []event.Event  `json:"events"`
		Next      event.Sequence `json:"next"`
		FirstKept event.Sequence `json:"first_kept,omitempty"`
	}{Events: make([]event.Event, 0, len(rows)), Next: event.Sequence(after)}
	if len(rows) == 0 { // caught up, or every event after it deleted, or after is past the last: one read tells
		last, err := a.eventsDB().LastSequence(r.Context())
		if err != nil {
			a.Fail(w, r, err)
			return
		}
		if after > last {
			a.Fail(w, r, httpapi.BadRequest("after_past_last", "after "+strconv.FormatInt(after, 10)+" is past the last event published, "+
				strconv.FormatInt(last, 10)+": pass the next of a page this gateway answered, or 0"))
			return
		}
		if after < last {
			// Every event after it was deleted past the retention: the
			// first kept will be the next one published, and the page
			// moves on past the gone ones.
			out.FirstKept, out.Next = event.Sequence(last+1), event.Sequence(last)
		}
	}
	if len(rows) > 0 && rows[0].Sequence > after+1 {
		// The events between were deleted: say where the kept ones begin.
		out.FirstKept = event.Sequence(rows[0].Sequence)
	}
	for _, e := range rows {
		out.Next = event.Sequence(e.Sequence)
		if (voucherID != 0 && e.VoucherID != voucherID) || (typ != "" && event.TypeOf(e) != typ) {
			continue
		}
		out.Events = append(out.Events, event.Of(a.Source, e))
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
}

// eventsQuery refuses a query of the events API with a parameter it does
// not take, or a type it does not know (voucherParam reads voucher_id).
func eventsQuery(r *http.Request) error {
	for k, vs := range r.URL.Query() {
		switch {
		case k != "after" && k != "limit" && k != "voucher_id" && k != "type":
			return httpapi.BadRequest("unknown_field", "the events API takes after, limit, voucher_id and type, not "+strconv.Quote(k))
		case len(vs) > 1:
			return httpapi.BadRequest("invalid_field", k+" is given more than once")
		}
	}
	if s := r.URL.Query().Get("type"); s != "" && !slices.Contains(event.Types(), s) {
		return httpapi.BadRequest("invalid_field", "type must be one of "+strings.Join(event.Types(), ", "))
	}
	return nil
}

// listSinks: GET /admin/v1/events/sinks → {"published_up_to": N,
// "sinks": [...]}: where each sink the reapers relay to stands (the
// console's sinks row; "reaper events" says the same).
func (a *API) listSinks(w http.ResponseWriter, r *http.Request) {
	if !a.EventsReader(w, r) {
		return
	}
	last, err := a.eventsDB().LastSequence(r.Context())
	if err != nil {
		a.Fail(w, r, err)
		return
	}
	states, err := a.eventsDB().SinkStates(r.Context())
	if err != nil {
		a.Fail(w, r, err)
		return
	}
	out := struct {
		Published int64              `json:"published_up_to"`
		Sinks     []event.SinkStatus `json:"sinks"`
	}{last, make([]event.SinkStatus, 0, len(states))}
	for _, st := range states {
		out.Sinks = append(out.Sinks, event.StatusOf(st, last, time.Now()))
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
}

// eventsDB is the pool the events' routes read: the events readers' own.
func (a *API) eventsDB() *db.Store {
	if a.EventsDB != nil {
		return a.EventsDB
	}
	return a.DB
}
