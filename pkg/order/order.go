package order

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Status is stored in orders.status and returned by the API as the same word.
type Status string

const (
	// StatusPending means admitted by Redis, not yet persisted in MySQL. Never stored.
	StatusPending Status = "pending"
	// StatusCreated means persisted, stock deducted in MySQL, awaiting payment.
	StatusCreated Status = "created"
	// StatusPaid means paid by its owner.
	StatusPaid Status = "paid"
	// StatusCancelled means not paid in time; its stock was released.
	StatusCancelled Status = "cancelled"
	// StatusFailed means admitted by Redis but refused by MySQL (e.g. no stock
	// left there); its Redis reservation was released.
	StatusFailed Status = "failed"
	// StatusCompleted means persisted, and final without a payment (a red
	// envelope grab): it never expires.
	StatusCompleted Status = "completed"
	// StatusEntered means an entry of a draw sale (pkg/draw), persisted, waiting
	// for the draw. It holds no unit.
	StatusEntered Status = "entered"
	// StatusLost means an entry the draw did not pick (yet: it is on the
	// waitlist, and may still become created).
	StatusLost Status = "lost"
)

// Live are the statuses of an order that holds its units (and its item).
var Live = []Status{StatusCreated, StatusPaid, StatusCompleted}

// IsLive reports whether s holds its units.
func (s Status) IsLive() bool {
	return s == StatusCreated || s == StatusPaid || s == StatusCompleted
}

// Order is one admitted claim as it travels through the stream.
type Order struct {
	ID        int64
	VoucherID int64
	UserID    string
	CreatedAt time.Time
	// Day is the sale-time-zone day (yyyymmdd) the claim counted against.
	Day string
	// Quantity is the units the order took, all or nothing: 1 to
	// MaxQuantity. Per-user and per-day limits count units. Zero, in an
	// order built by hand, means 1 (see Units).
	Quantity int64
	// Item is what the order took from a pooled voucher's pool (an
	// envelope, a code); zero for a voucher of units.
	Item Item
	// Entry: an entry of a draw sale, not an order; it takes no unit
	// until the draw picks it (pkg/draw).
	Entry bool
	// Claim is the serial of the claim that made the order (admission.Claim's
	// Serial): a buyer's claim asked about by its id finds its own order
	// by it. Zero for orders made before serials, or without one.
	Claim uint64
}

// Item is one envelope or code of a pooled voucher. No numbers the items of
// a voucher from 1; Amount is an envelope's amount in minor units, Code a
// code's text.
type Item struct {
	No     int64
	Amount int64
	Code   string
}

// IsZero reports an order that took no item.
func (i Item) IsZero() bool { return i.No == 0 }

// Encode is the item as the pool in Redis and the stream entry hold it:
// "no|amount|code". A code never holds '|' (see MaxCodeLen).
func (i Item) Encode() string {
	if i.IsZero() {
		return ""
	}
	return strconv.FormatInt(i.No, 10) + "|" + strconv.FormatInt(i.Amount, 10) + "|" + i.Code
}

// MaxCodeLen bounds a code: 1 to 64 characters of A-Z a-z 0-9 - _.
const MaxCodeLen = 64

// ValidCode reports whether c is a code a pool may hold.
func ValidCode(c string) bool {
	if len(c) == 0 || len(c) > MaxCodeLen {
		return false
	}
	for i := 0; i < len(c); i++ {
		b := c[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-' || b == '_') {
			return false
		}
	}
	return true
}

// ErrBadItem reports an encoded item that Encode did not make.
var ErrBadItem = errors.New("order: malformed item")

// ParseItem reads what Encode wrote; "" is the zero Item.
func ParseItem(s string) (Item, error) {
	if s == "" {
		return Item{}, nil
	}
	no, rest, ok1 := strings.Cut(s, "|")
	amount, code, ok2 := strings.Cut(rest, "|")
	n, err1 := strconv.ParseInt(no, 10, 64)
	a, err2 := strconv.ParseInt(amount, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || n < 1 || a < 0 || (code != "" && !ValidCode(code)) {
		return Item{}, fmt.Errorf("%w: %q", ErrBadItem, s)
	}
	return Item{No: n, Amount: a, Code: code}, nil
}

// MaxQuantity bounds the units of one order (a voucher's per-user limit
// bounds it further).
const MaxQuantity = 1000

// Units is the order's quantity, 1 when unset.
func (o Order) Units() int64 { return max(o.Quantity, 1) }

// Layout of an order id (63 bits, always positive):
//
//	41 bits  milliseconds since Epoch of its stream entry's id
//	 7 bits  sequence of its stream entry's id within that millisecond
//	 5 bits  the order's index among the orders of its stream entry
//	10 bits  stream partition
//
// One stream entry carries the orders of one admission call (see
// admit.lua), up to MaxPerEntry of them. The middle 12 bits, entry
// sequence and index together, are the order's position within its
// millisecond: admit.lua answers, and the idempotency records and the
// users' indexes hold, an order as "ms-position". The stream entry id is
// unique within its partition, so the order id is unique across gateway
// replicas and partitions, and it leads back to the stream entry (and the
// order within it) while the order is still pending.
const (
	partitionBits = 10
	indexBits     = 5
	entrySeqBits  = 7
	positionBits  = entrySeqBits + indexBits
	// MaxPartitions is the number of partitions an order id can name.
	MaxPartitions = 1 << partitionBits
	// MaxPerEntry bounds the orders one stream entry carries.
	MaxPerEntry = 1 << indexBits
	// MaxEntrySeq bounds the per-millisecond sequence of a stream entry an
	// order id can name.
	MaxEntrySeq = 1 << entrySeqBits
	// MaxPosition bounds an order's position within its millisecond.
	MaxPosition = 1 << positionBits
)

// Epoch is the zero of the order id's time part: 2024-01-01T00:00:00Z.
var Epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

var epochMs = Epoch.UnixMilli()

// ErrBadEntryID reports a stream entry id (or position) an order id cannot
// be made from.
var ErrBadEntryID = errors.New("order: stream entry id cannot be an order id")

// IDFromPosition makes the order id of position pos ("ms-position", as
// admit.lua answers) in partition p. A stream entry written before entries
// carried several orders holds one order, whose position is the entry's id.
func IDFromPosition(pos string, p int) (int64, error) {
	ms, seq, err := splitID(pos)
	if err != nil || seq >= MaxPosition || p < 0 || p >= MaxPartitions {
		return 0, fmt.Errorf("%w: %q in partition %d", ErrBadEntryID, pos, p)
	}
	return (ms-epochMs)<<(positionBits+partitionBits) | seq<<partitionBits | int64(p), nil
}

// IDOf makes the order id of the index-th order (from 0) of stream entry
// entryID ("ms-seq") in partition p.
func IDOf(entryID string, index, p int) (int64, error) {
	ms, seq, err := splitID(entryID)
	if err != nil || seq >= MaxEntrySeq || index < 0 || index >= MaxPerEntry || p < 0 || p >= MaxPartitions {
		return 0, fmt.Errorf("%w: %q index %d in partition %d", ErrBadEntryID, entryID, index, p)
	}
	return (ms-epochMs)<<(positionBits+partitionBits) | (seq<<indexBits|int64(index))<<partitionBits | int64(p), nil
}

// splitID reads "ms-seq" with ms in the order id's range.
func splitID(id string) (ms, seq int64, err error) {
	msPart, seqPart, ok := strings.Cut(id, "-")
	ms, err1 := strconv.ParseInt(msPart, 10, 64)
	seq, err2 := strconv.ParseInt(seqPart, 10, 64)
	if !ok || err1 != nil || err2 != nil || ms < epochMs || ms-epochMs >= 1<<41 || seq < 0 {
		return 0, 0, ErrBadEntryID
	}
	return ms, seq, nil
}

// EntryOf returns the partition and stream entry id order id id was made
// from, and the order's index in that entry.
func EntryOf(id int64) (partition int, entryID string, index int) {
	p := int(id & (MaxPartitions - 1))
	pos := (id >> partitionBits) & (MaxPosition - 1)
	ms := id>>(positionBits+partitionBits) + epochMs
	return p, strconv.FormatInt(ms, 10) + "-" + strconv.FormatInt(pos>>indexBits, 10), int(pos & (MaxPerEntry - 1))
}

// Day formats t as the yyyymmdd day in loc, the unit of per-day limits.
func Day(t time.Time, loc *time.Location) string {
	return t.In(loc).Format("20060102")
}

// Days is Day in one time zone, remembering the last day it formatted:
// the day a claim counts under changes once a day, so a gateway's claims
// need no formatting (nor the string it allocates) but the first of each
// day. Safe for concurrent use.
type Days struct {
	loc  *time.Location
	last atomic.Pointer[dayRange]
}

// dayRange is one day's name and its bounds, [from, to) in unix
// nanoseconds.
type dayRange struct {
	from, to int64
	name     string
}

// NewDays returns a Days of loc.
func NewDays(loc *time.Location) *Days { return &Days{loc: loc} }

// Of is Day(t, loc).
func (d *Days) Of(t time.Time) string {
	n := t.UnixNano()
	if r := d.last.Load(); r != nil && n >= r.from && n < r.to {
		return r.name
	}
	lt := t.In(d.loc)
	y, m, day := lt.Date()
	r := &dayRange{from: time.Date(y, m, day, 0, 0, 0, 0, d.loc).UnixNano(), to: time.Date(y, m, day+1, 0, 0, 0, 0, d.loc).UnixNano(),
		name: lt.Format("20060102")}
	// Remembered only when both bounds are the day's true ones: on a day
	// whose midnight the zone's clocks skip, time.Date may give a bound
	// an hour off, and that day is formatted each time instead.
	name := func(ns int64) string { return Day(time.Unix(0, ns), d.loc) }
	if n >= r.from && n < r.to && name(r.from) == r.name && name(r.from-1) != r.name && name(r.to-1) == r.name && name(r.to) != r.name {
		d.last.Store(r)
	}
	return r.name
}
