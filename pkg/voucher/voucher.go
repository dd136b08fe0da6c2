// Package voucher holds the rules of creating and changing a voucher: a
// request's fields checked, against each other and against the voucher as
// it is, into the db.Voucher or db.Edit that MySQL records. What a kind of
// sale puts on sale is pkg/sale's (Prepare); this package adds what every
// kind shares: names, limits, the sale window, stock buckets, a draw, a
// proof-of-work gate, a waiting room, access codes.
//
// Every refusal is a *sale.FieldError (the field, whether it was missing,
// a message for the person who sent it), except ErrDrawClosed. It does no
// I/O: the gateway decodes the request, calls Create or Change, and
// records the result.
package voucher

import (
	"cmp"
	crand "crypto/rand"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/draw"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/room"
	"github.com/flashsale/flashsale/pkg/sale"
)

// Bounds of a voucher.
const (
	MaxPerUserLimit       = 1_000
	MaxPaymentTimeout     = 7 * 24 * 3600
	DefaultPaymentTimeout = 15 * 60
	MaxNameBytes          = 128
	// MaxPowNumber bounds a gate's difficulty (ALTCHA's max number): a
	// browser tries half of it on average.
	MaxPowNumber = 10_000_000
)

// Request is the body of POST /admin/v1/vouchers.
type Request struct {
	Name string `json:"name"`
	// Kind is a kind of pkg/sale, and Spec the fields of kinds.
	Kind string `json:"kind"`
	sale.Spec
	PerUserLimit          *int64  `json:"per_user_limit"`
	PerUserDailyLimit     *int64  `json:"per_user_daily_limit"`
	StartsAt              *string `json:"starts_at"`
	EndsAt                *string `json:"ends_at"`
	PaymentTimeoutSeconds *int64  `json:"payment_timeout_seconds"`
	// StockBuckets spreads a hot voucher's stock over Redis buckets
	// (1..rdb.MaxBuckets; units only).
	StockBuckets *int64 `json:"stock_buckets"`
	// Allocation: first_come (default) or draw (pkg/draw).
	Allocation *string `json:"allocation"`
	// ProofOfWork puts a proof-of-work gate on its claims (pkg/proof), or
	// on its waiting room's door.
	ProofOfWork *Gate `json:"proof_of_work"`
	// WaitingRoom puts a waiting room in front of its claims (pkg/room).
	WaitingRoom *room.Config `json:"waiting_room"`
	// Access asks for access codes (pkg/access); null: none.
	Access *Access `json:"access"`
}

// Gate is a proof-of-work gate: its difficulty, ALTCHA's max number.
type Gate struct {
	MaxNumber int64 `json:"max_number"`
}

// GateOf is v's proof-of-work gate, nil without one.
func GateOf(v db.Voucher) *Gate {
	if v.PowMaxNumber == 0 {
		return nil
	}
	return &Gate{MaxNumber: v.PowMaxNumber}
}

// difficulty checks a gate's max_number.
func (g Gate) difficulty() (int64, error) {
	if g.MaxNumber < 1 || g.MaxNumber > MaxPowNumber {
		return 0, invalid("proof_of_work", "proof_of_work.max_number must be between 1 and "+itoa(MaxPowNumber))
	}
	return g.MaxNumber, nil
}

// NewRand is a generator seeded from the operating system, for drawing
// envelope amounts nobody can predict.
func NewRand() *rand.Rand {
	var seed [32]byte
	_, _ = crand.Read(seed[:]) // never fails on Linux (crypto/rand doc)
	return rand.New(rand.NewChaCha8(seed))
}

// Create checks the request and returns the voucher and, for a pooled
// kind, its items, as its kind plans them (sale.Prepare). rnd draws what is
// random (envelope amounts).
func (req Request) Create(now time.Time, rnd *rand.Rand) (db.Voucher, []order.Item, error) {
	v, err := req.common(now)
	if err != nil {
		return v, nil, err
	}
	kind, err := sale.Lookup(req.Kind)
	if err != nil {
		return v, nil, invalid("kind", "kind must be one of "+strings.Join(sale.Names(), ", "))
	}
	plan, err := sale.Prepare(kind, req.Spec, rnd)
	if err != nil {
		return v, nil, err
	}
	v.Kind, v.Stock, v.StockTotal, v.TotalAmount, v.MinAmount = kind.Name(), plan.Stock, plan.Stock, plan.TotalAmount, plan.MinAmount
	buckets, err := intField("stock_buckets", req.StockBuckets, 1, 1, rdb.MaxBuckets)
	if err != nil {
		return v, nil, err
	}
	if buckets > 1 && !kind.Traits().Spread {
		return v, nil, invalid("stock_buckets", "stock_buckets must be 1 for a "+kind.Name()+" voucher: only a count of units is spread over buckets")
	}
	v.StockBuckets = int(buckets)
	if err := req.allocation(&v, kind); err != nil {
		return v, nil, err
	}
	if req.ProofOfWork != nil {
		if v.PowMaxNumber, err = req.ProofOfWork.difficulty(); err != nil {
			return v, nil, err
		}
	}
	if req.WaitingRoom != nil {
		if v.WaitingRoom, err = waitingRoom(v, req.WaitingRoom); err != nil {
			return v, nil, err
		}
	}
	if req.Access != nil {
		if v.Access, err = req.Access.value(now, v.StartsAt); err != nil {
			return v, nil, err
		}
	}
	return v, plan.Items, nil
}

// allocation sets v's allocation; a draw gets its seed and commitment.
func (req Request) allocation(v *db.Voucher, kind sale.Kind) error {
	v.Allocation = draw.FirstCome
	if req.Allocation == nil || *req.Allocation == draw.FirstCome {
		return nil
	}
	if *req.Allocation != draw.Draw {
		return invalid("allocation", "allocation must be first_come or draw")
	}
	switch {
	case kind.Traits().NoPayment:
		return invalid("allocation", "a "+kind.Name()+" voucher cannot be drawn: a draw's winners pay for what they won (units or codes)")
	case v.EndsAt == nil:
		return missing("ends_at", "ends_at is required for a draw: the winners are drawn when the entries close")
	case req.PerUserLimit != nil && *req.PerUserLimit != 1:
		return invalid("per_user_limit", "per_user_limit must be 1 for a draw: one entry per user")
	case v.PerUserDailyLimit != 0:
		return invalid("per_user_daily_limit", "per_user_daily_limit must be 0 for a draw")
	case v.StockBuckets > 1:
		return invalid("stock_buckets", "stock_buckets must be 1 for a draw: entries take no stock")
	}
	seed := draw.NewSeed()
	v.Allocation, v.PerUserLimit, v.DrawState = draw.Draw, 1, draw.StateOpen
	v.DrawSeed, v.SeedCommitment = seed.Hex(), seed.Commitment()
	return nil
}

// common checks the fields every kind has.
func (req Request) common(now time.Time) (db.Voucher, error) {
	v := db.Voucher{Name: strings.TrimSpace(req.Name), CreatedAt: now.UTC().Truncate(time.Millisecond)}
	if v.Name == "" || len(v.Name) > MaxNameBytes {
		return v, invalid("name", "name is required, at most "+itoa(MaxNameBytes)+" bytes")
	}
	if !Printable(v.Name) {
		return v, invalid("name", "name must be printable text: no control characters (NUL, ESC, newlines) and no bidirectional controls (U+202E), which would show it other than it is")
	}
	var err error
	if v.PerUserLimit, err = intField("per_user_limit", req.PerUserLimit, 1, 1, MaxPerUserLimit); err != nil {
		return v, err
	}
	if v.PerUserDailyLimit, err = intField("per_user_daily_limit", req.PerUserDailyLimit, 0, 0, MaxPerUserLimit); err != nil {
		return v, err
	}
	if v.PaymentTimeoutSeconds, err = intField("payment_timeout_seconds", req.PaymentTimeoutSeconds, DefaultPaymentTimeout, 1, MaxPaymentTimeout); err != nil {
		return v, err
	}
	if v.StartsAt, err = ParseTime("starts_at", req.StartsAt); err != nil {
		return v, err
	}
	if v.EndsAt, err = ParseTime("ends_at", req.EndsAt); err != nil {
		return v, err
	}
	if v.StartsAt != nil && v.EndsAt != nil && !v.EndsAt.After(*v.StartsAt) {
		return v, invalid("ends_at", "ends_at must be after starts_at")
	}
	if v.EndsAt != nil && !v.EndsAt.After(now) {
		return v, invalid("ends_at", "ends_at must be in the future: this sale would be over before it began")
	}
	return v, nil
}

// waitingRoom checks room c for voucher v and returns it as stored.
func waitingRoom(v db.Voucher, c *room.Config) (string, error) {
	if err := c.Validate(); err != nil {
		return "", invalid("waiting_room", err.Error())
	}
	switch {
	case v.IsDraw():
		return "", invalid("waiting_room", "a draw has no waiting room: its entries are not first come, first served")
	case v.StockBuckets > 1 || v.Splitting():
		return "", invalid("stock_buckets", "stock_buckets must be 1 with a waiting room: the room meters the claims, so the stock need not be spread")
	}
	return c.Encode(), nil
}

// Consistent decides on voucher v as a change leaves it (its row locked:
// db.Edit.Check), with to, a split asked with the change (0: none): a
// waiting room never goes with several buckets or a split asked,
// whichever came first.
func Consistent(v db.Voucher, to int64, now time.Time) error {
	if to > 0 {
		return Split(v, to, now) // it refuses a room
	}
	if v.WaitingRoom != "" && (v.StockBuckets > 1 || v.Splitting()) {
		return invalid("stock_buckets", "stock_buckets must be 1 with a waiting room: the room meters the claims, so the stock need not be spread")
	}
	return nil
}

// RoomOf is v's waiting room, nil without one.
func RoomOf(v db.Voucher) *room.Config {
	c, _ := room.Decode(v.WaitingRoom)
	return c
}

// Revealed is a draw's seed once it is drawn, "" before (and for a sale
// that is not a draw).
func Revealed(v db.Voucher) string {
	if v.DrawState == draw.StateDrawn {
		return v.DrawSeed
	}
	return ""
}

// Allocation is v's allocation, first_come when none was recorded.
func Allocation(v db.Voucher) string { return cmp.Or(v.Allocation, draw.FirstCome) }

// Printable reports whether s, a name people read in the console and in
// reports, holds no control character (category Cc) and no bidirectional
// formatting character: U+202E shows a name reversed, ESC drives a
// terminal that prints it. Names are refused, not cleaned: what is stored
// is what was sent.
func Printable(s string) bool {
	for _, r := range s {
		switch {
		case unicode.Is(unicode.Cc, r), r == utf8.RuneError,
			r == '\u061c', r == '\u200e', r == '\u200f', // letter marks
			r >= '\u202a' && r <= '\u202e', r >= '\u2066' && r <= '\u2069': // embeddings, overrides, isolates
			return false
		}
	}
	return true
}

// ParseTime reads field, an RFC 3339 time, to the millisecond; nil when
// absent.
func ParseTime(field string, s *string) (*time.Time, error) {
	if s == nil {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339, *s)
	if err != nil {
		return nil, invalid(field, field+" must be an RFC 3339 time")
	}
	t = t.UTC().Truncate(time.Millisecond)
	// Redis holds sale times as Unix milliseconds, 0 meaning "none": a
	// time at or before 1970 would read as no bound at all.
	if !t.After(time.Unix(0, 0)) || t.Year() > 9999 {
		return nil, invalid(field, field+" must be after 1970-01-01 and before year 10000")
	}
	return &t, nil
}

// intField is field's value within [lo, hi], or def when absent (def < 0:
// the field is required).
func intField(field string, v *int64, def, lo, hi int64) (int64, error) {
	if v == nil {
		if def < 0 {
			return 0, missing(field, field+" is required")
		}
		return def, nil
	}
	if *v < lo || *v > hi {
		return 0, invalid(field, field+" must be between "+itoa(lo)+" and "+itoa(hi))
	}
	return *v, nil
}

// ErrDrawClosed refuses a change of a draw whose entries have closed.
var ErrDrawClosed = errors.New("a draw sale cannot be changed once its entries have closed")

func invalid(field, msg string) error { return &sale.FieldError{Field: field, Msg: msg} }
func missing(field, msg string) error {
	return &sale.FieldError{Field: field, Missing: true, Msg: msg}
}
func itoa(n int64) string { return strconv.FormatInt(n, 10) }
