// Package event is an order event as it leaves flashsale: a CloudEvents
// 1.0 JSON object (docs/EVENTS.md) made from a row of the events outbox
// (pkg/db events.go). The same event makes the same bytes every time, so
// a redelivered event is the same event.
package event

import (
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

// TypePrefix begins every event's type: the type is TypePrefix + the
// status the order reached (order.created, order.paid, ...).
const TypePrefix = "order."

// Event is a CloudEvents 1.0 event in its JSON form.
type Event struct {
	SpecVersion     string `json:"specversion"`
	ID              string `json:"id"`
	Source          string `json:"source"`
	Type            string `json:"type"`
	Subject         string `json:"subject"`
	Time            string `json:"time"`
	DataContentType string `json:"datacontenttype"`
	// Sequence (the CloudEvents sequence extension): a decimal integer,
	// one more than the event published before it, written in
	// SequenceWidth digits, zero-padded, so sequences sort as text in
	// their numeric order as the extension asks (FormatSequence).
	Sequence string `json:"sequence"`
	Data     Data   `json:"data"`
}

// Data is the order as GET /v1/orders/{id} shows it, as the change left
// it, and why, for a cancellation or a failure.
type Data struct {
	orderview.Order
	// Reason: why the order was cancelled (payment_expired,
	// cancelled_by_user) or failed (out_of_stock, ...); absent otherwise.
	Reason string `json:"reason,omitempty"`
}

// Types are the events' types: one per status an order changes to
// (docs/EVENTS.md's table).
func Types() []string {
	out := make([]string, 0, 8)
	for _, st := range []order.Status{order.StatusCreated, order.StatusCompleted, order.StatusEntered, order.StatusLost,
		order.StatusPaid, order.StatusCancelled, order.StatusFailed} {
		out = append(out, TypePrefix+string(st))
	}
	return out
}

// Of is event e of the outbox, sequenced, as an event from source.
func Of(source string, e db.Event) Event {
	var seq string
	if e.Sequence > 0 {
		seq = FormatSequence(e.Sequence)
	}
	d := Data{Order: orderview.Of(e.Order())}
	if s := order.Status(e.Status); s == order.StatusCancelled || s == order.StatusFailed {
		d.Reason = e.Reason
	}
	return Event{SpecVersion: "1.0", ID: e.ID(), Source: source, Type: TypePrefix + e.Status,
		Subject: strconv.FormatInt(e.OrderID, 10), Time: e.OccurredAt.UTC().Format(time.RFC3339Nano),
		DataContentType: "application/json", Sequence: seq, Data: d}
}

// SequenceWidth is the digits of every sequence as the events carry it:
// a BIGINT UNSIGNED's, so no sequence MySQL holds is wider.
const SequenceWidth = 20

// FormatSequence is seq (0 or more) as events, pages and Kafka headers
// carry it: SequenceWidth decimal digits, zero-padded ("00000000000000000041").
func FormatSequence(seq int64) string {
	var b [SequenceWidth]byte
	d := strconv.AppendInt(b[:0:SequenceWidth], seq, 10)
	if len(d) >= SequenceWidth {
		return string(d)
	}
	pad := SequenceWidth - len(d)
	copy(b[pad:], d)
	for i := range pad {
		b[i] = '0'
	}
	return string(b[:])
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
	b = str(b, `sequence":`, e.Sequence)
	d := &e.Data
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
