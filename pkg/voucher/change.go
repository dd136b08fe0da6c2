package voucher

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/draw"
	"github.com/flashsale/flashsale/pkg/room"
	"github.com/flashsale/flashsale/pkg/sale"
)

// Change is the body of PATCH /admin/v1/vouchers/{id}.
type Change struct {
	AddStock *int64  `json:"add_stock"`
	EndsAt   *string `json:"ends_at"`
	// ProofOfWork: a new gate, or null to turn it off (absent: unchanged).
	ProofOfWork json.RawMessage `json:"proof_of_work"`
	// WaitingRoom: a new room, or null to take it away (absent: unchanged).
	WaitingRoom json.RawMessage `json:"waiting_room"`
	// Access: new access codes, or null to need none (absent: unchanged).
	Access json.RawMessage `json:"access"`
	// StockBuckets: split the voucher's Redis buckets to this many while
	// its sale runs (Split's rules; the reaper's splitter does it).
	StockBuckets *int64 `json:"stock_buckets"`
}

// Other reports whether the change asks more than a split.
func (c Change) Other() bool {
	return c.AddStock != nil || c.EndsAt != nil || c.ProofOfWork != nil || c.WaitingRoom != nil || c.Access != nil
}

// Edit checks what can be checked of the change without the voucher, and
// returns the edit without its room (Against reads it).
func (c Change) Edit(now time.Time) (db.Edit, error) {
	var e db.Edit
	var err error
	if e.Pow, err = c.gate(); err != nil {
		return e, err
	}
	if c.AddStock == nil && c.EndsAt == nil && e.Pow == nil && c.WaitingRoom == nil && c.Access == nil && c.StockBuckets == nil {
		return e, missing("add_stock", "add_stock, ends_at, proof_of_work, waiting_room, access or stock_buckets is required")
	}
	if c.AddStock != nil {
		if *c.AddStock < 1 || *c.AddStock > sale.MaxStock {
			return e, invalid("add_stock", "add_stock must be between 1 and "+itoa(sale.MaxStock))
		}
		e.AddStock = *c.AddStock
	}
	if e.EndsAt, err = ParseTime("ends_at", c.EndsAt); err != nil {
		return e, err
	}
	if e.EndsAt != nil && !e.EndsAt.After(now) {
		return e, invalid("ends_at", "ends_at must be in the future")
	}
	return e, nil
}

// Against checks edit e, from Edit, against voucher v as it is now, and
// sets its room and its access codes, whose rules depend on v.
func (c Change) Against(v db.Voucher, e *db.Edit, now time.Time) error {
	switch {
	case e.EndsAt != nil && v.StartsAt != nil && !e.EndsAt.After(*v.StartsAt):
		return invalid("ends_at", "ends_at must be after starts_at")
	case v.IsDraw() && (v.DrawState != draw.StateOpen || (v.EndsAt != nil && !now.Before(*v.EndsAt))):
		return ErrDrawClosed
	case v.StockTotal+e.AddStock > sale.MaxStock:
		return invalid("add_stock", "stock_total would exceed "+itoa(sale.MaxStock))
	}
	var err error
	if e.Room, err = c.room(v); err != nil {
		return err
	}
	e.Access, err = c.access(v, now)
	return err
}

// setting reads a change's field raw, an object or null: absent (nil)
// is (nil, false), null is (nil, true), an object is decoded exactly into
// a new T; anything else is field's invalid_field with msg.
func setting[T any](raw json.RawMessage, field, msg string) (val *T, null bool, err error) {
	if raw == nil {
		return nil, false, nil
	}
	if string(bytes.TrimSpace(raw)) == "null" {
		return nil, true, nil
	}
	val = new(T)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(val); err != nil {
		return nil, false, invalid(field, msg)
	}
	return val, false, nil
}

// room reads the change's waiting_room for voucher v: nil when absent,
// "0" for null, else the room as stored.
func (c Change) room(v db.Voucher) (*string, error) {
	rc, null, err := setting[room.Config](c.WaitingRoom, "waiting_room",
		"waiting_room must be null or {\"admit_per_second\": N, \"prequeue_seconds\": S, \"pass_seconds\": P}")
	if rc == nil {
		return ptrIf(null, "0"), err
	}
	enc, err := waitingRoom(v, rc)
	return &enc, err
}

// gate reads the change's proof_of_work: nil when absent, 0 for null.
func (c Change) gate() (*int64, error) {
	g, null, err := setting[Gate](c.ProofOfWork, "proof_of_work", "proof_of_work must be null or {\"max_number\": N}")
	if g == nil {
		return ptrIf(null, int64(0)), err
	}
	n, err := g.difficulty()
	if err != nil {
		return nil, err
	}
	return &n, nil
}

// access reads the change's access for voucher v: nil when absent, 0 for
// null, else the new db.Voucher.Access.
func (c Change) access(v db.Voucher, now time.Time) (*int64, error) {
	a, null, err := setting[Access](c.Access, "access", "access must be null or {\"until\": \"<RFC 3339>\"} ({} for the whole sale)")
	if a == nil {
		return ptrIf(null, int64(0)), err
	}
	n, err := a.value(now, v.StartsAt)
	if err != nil {
		return nil, err
	}
	return &n, nil
}

// ptrIf is &x when ok, else nil.
func ptrIf[T any](ok bool, x T) *T {
	if !ok {
		return nil
	}
	return &x
}
