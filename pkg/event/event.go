// Package event is the order events from the outbox to the wire: the
// event (a CloudEvents 1.0 JSON object, docs/EVENTS.md), the sequencer
// that publishes the outbox's committed rows, the sinks (Kafka, webhook
// endpoints) and the relay that sends each sink the events in sequence
// order. pkg/db keeps the outbox and the sinks' rows; this package is
// everything that reads them.
//
// An outbox event (db.Event) becomes an Event once, when it is read
// (Of), and stays one until a sink writes its bytes: the same event
// makes the same bytes every time, so a redelivered event is the same
// event. Its Sequence is an int64 until it is written out.
package event

import (
	"fmt"
	"strconv"
	"time"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/jsonstr"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/orderview"
)

// DefaultSource is the events' source unless FLASHSALE_EVENTS_SOURCE says
// another.
const DefaultSource = "flashsale"

// TypePrefix begins every order event's type: the type is TypePrefix +
// the status the order reached (order.created, order.paid, ...).
const TypePrefix = "order."

// TypeSplit is a voucher's split's event: its Redis buckets were raised
// while it sells.
const TypeSplit = db.SplitTag

// Event is a CloudEvents 1.0 event in its JSON form.
type Event struct {
	SpecVersion     string `json:"specversion"`
	ID              string `json:"id"`
	Source          string `json:"source"`
	Type            string `json:"type"`
	Subject         string `json:"subject"`
	Time            string `json:"time"`
	DataContentType string `json:"datacontenttype"`
	// Sequence (the CloudEvents sequence extension): one more than the
	// event published before it.
	Sequence Sequence `json:"sequence"`
	// Data is the event's data: a Data for an order's event, a SplitData
	// for a voucher's split.
	Data any `json:"data"`
}

// Sequence is an event's place in the order events are published: 1, 2,
// 3, ... with no gap. It is written (String, MarshalText) in
// SequenceWidth decimal digits, zero-padded ("00000000000000000041"),
// so sequences sort as text in their numeric order as the CloudEvents
// extension asks; it reads any decimal form, leading zeros or not.
type Sequence int64

// SequenceWidth is the digits of every sequence as written: a BIGINT
// UNSIGNED's, so no sequence MySQL holds is wider.
const SequenceWidth = 20

// String is the sequence as events, pages and Kafka headers carry it.
func (s Sequence) String() string { return string(s.Append(make([]byte, 0, SequenceWidth))) }

// Append appends the sequence's SequenceWidth digits to b.
func (s Sequence) Append(b []byte) []byte {
	var buf [SequenceWidth]byte
	d := strconv.AppendInt(buf[:0], int64(s), 10)
	for range SequenceWidth - len(d) {
		b = append(b, '0')
	}
	return append(b, d...)
}

// MarshalText writes the sequence as String does.
func (s Sequence) MarshalText() ([]byte, error) { return s.Append(nil), nil }

// UnmarshalText reads a decimal sequence, 0 or more.
func (s *Sequence) UnmarshalText(b []byte) error {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || n < 0 || b[0] == '+' { // ParseInt refuses "" before b[0] is read
		return fmt.Errorf("sequence %q is not a decimal integer of 0 or more", b)
	}
	*s = Sequence(n)
	return nil
}

// Data is the order as GET /v1/orders/{id} shows it, as the change left
// it, and why, for a cancellation or a failure.
type Data struct {
	orderview.Order
	// Reason: why the order was cancelled (payment_expired,
	// cancelled_by_user) or failed (out_of_stock, ...); absent otherwise.
	Reason string `json:"reason,omitempty"`
}

// SplitData is a voucher's split: its Redis buckets are stock_buckets
// from split_at (the admin API's fields).
type SplitData struct {
	VoucherID    string    `json:"voucher_id"`
	StockBuckets int       `json:"stock_buckets"`
	SplitAt      time.Time `json:"split_at"`
}

// Types are the events' types: one per status an order changes to, and
// a voucher's split (docs/EVENTS.md's table).
func Types() []string {
	out := make([]string, 0, 8)
	for _, st := range []order.Status{order.StatusCreated, order.StatusCompleted, order.StatusEntered, order.StatusLost,
		order.StatusPaid, order.StatusCancelled, order.StatusFailed} {
		out = append(out, TypePrefix+string(st))
	}
	return append(out, TypeSplit)
}

// TypeOf is outbox event e's type.
func TypeOf(e db.OutboxEvent) string {
	if e.Split != nil {
		return TypeSplit
	}
	return TypePrefix + e.Status
}

// Of is event e of the outbox, sequenced, as an event from source. Its
// subject is the order's id, or a split voucher's.
func Of(source string, e db.OutboxEvent) Event {
	ev := Event{SpecVersion: "1.0", ID: e.ID(), Source: source, Type: TypeOf(e),
		Time: e.OccurredAt.UTC().Format(time.RFC3339Nano), DataContentType: "application/json", Sequence: Sequence(e.Sequence)}
	if e.Split != nil {
		ev.Subject = strconv.FormatInt(e.VoucherID, 10)
		ev.Data = SplitData{VoucherID: ev.Subject, StockBuckets: e.Split.Buckets, SplitAt: e.Split.At}
		return ev
	}
	d := Data{Order: orderview.Of(e.Order())}
	if s := order.Status(e.Status); s == order.StatusCancelled || s == order.StatusFailed {
		d.Reason = e.Reason
	}
	ev.Subject, ev.Data = strconv.FormatInt(e.OrderID, 10), d
	return ev
}

// ValidSource reports whether s may be the events' source: 1-255
// printable ASCII characters without spaces, as a URI-reference is.
func ValidSource(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// JSON is the event's body: what encoding/json makes of e, byte for
// byte, written by hand (AppendJSON).
func (e Event) JSON() []byte { return e.AppendJSON(make([]byte, 0, 512)) }

// AppendJSON appends the event's body to b. The relay makes one for
// every event it sends, and encoding/json's reflection cost more than
// signing it; FuzzEventJSON holds the two to the same bytes.
func (e Event) AppendJSON(b []byte) []byte {
	str := func(b []byte, name, v string) []byte {
		return jsonstr.Append(append(append(b, ',', '"'), name...), v)
	}
	b = jsonstr.Append(append(b, `{"specversion":`...), e.SpecVersion)
	b = str(b, `id":`, e.ID)
	b = str(b, `source":`, e.Source)
	b = str(b, `type":`, e.Type)
	b = str(b, `subject":`, e.Subject)
	b = str(b, `time":`, e.Time)
	b = str(b, `datacontenttype":`, e.DataContentType)
	b = append(e.Sequence.Append(append(b, `,"sequence":"`...)), '"')
	var d Data
	switch v := e.Data.(type) {
	case Data:
		d = v
	case SplitData:
		b = jsonstr.Append(append(b, `,"data":{"voucher_id":`...), v.VoucherID)
		b = strconv.AppendInt(append(b, `,"stock_buckets":`...), int64(v.StockBuckets), 10)
		b = appendTime(append(b, `,"split_at":`...), v.SplitAt)
		return append(b, '}', '}')
	}
	b = jsonstr.Append(append(b, `,"data":{"order_id":`...), d.OrderID)
	b = str(b, `voucher_id":`, d.VoucherID)
	b = str(b, `user_id":`, d.UserID)
	b = strconv.AppendInt(append(b, `,"quantity":`...), d.Quantity, 10)
	if d.Amount != 0 {
		b = strconv.AppendInt(append(b, `,"amount":`...), d.Amount, 10)
	}
	if d.Code != "" {
		b = str(b, `code":`, d.Code)
	}
	b = str(b, `status":`, d.Status)
	b = appendTime(append(b, `,"created_at":`...), d.CreatedAt)
	if d.ExpiresAt != nil {
		b = appendTime(append(b, `,"expires_at":`...), *d.ExpiresAt)
	}
	if d.PaidAt != nil {
		b = appendTime(append(b, `,"paid_at":`...), *d.PaidAt)
	}
	if d.Draw != "" {
		b = str(b, `draw":`, d.Draw)
	}
	if d.Reason != "" {
		b = str(b, `reason":`, d.Reason)
	}
	return append(b, '}', '}')
}

// appendTime appends t as encoding/json writes a time.Time (RFC 3339,
// nanoseconds without trailing zeros); a time outside years 0-9999,
// which encoding/json refuses and no order has, as null.
func appendTime(b []byte, t time.Time) []byte {
	if y := t.Year(); y < 0 || y > 9999 {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}
