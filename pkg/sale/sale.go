package sale

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/flashsale/flashsale/pkg/order"
)

// Traits are what the pipeline needs to know of a kind.
type Traits struct {
	// Pooled: each admission takes one item (an envelope, a code) of the
	// voucher's pool, so a claim is always of one unit.
	Pooled bool
	// NoPayment: an order is final once persisted (completed); it never
	// awaits payment and never expires.
	NoPayment bool
	// RefundsAtEnd: when the sale is over, what nobody took is refunded to
	// the sender, once (the reaper's refunder).
	RefundsAtEnd bool
	// Spread: its stock may be spread over Redis buckets (stock_buckets >
	// 1): a count can be split, a pool of distinct items is one list.
	Spread bool
	// ToppedUp: stock may be added while it is on sale (a pool's items are
	// fixed when it is created).
	ToppedUp bool
	// Amounts: its items carry amounts of money (remaining and refunded
	// amounts are reported, and conserved).
	Amounts bool
}

// Kind is one kind of sale.
type Kind interface {
	// Name is the kind's word in the API and in vouchers.kind.
	Name() string
	Traits() Traits
	// Fields are the JSON names of the fields of Spec this kind takes;
	// Prepare refuses the others.
	Fields() []string
	// Plan checks a creation request's fields of this kind and returns
	// what goes on sale. rnd draws anything random (envelope amounts).
	Plan(s Spec, rnd *rand.Rand) (Plan, error)
}

// Prepare plans a voucher of kind k from s: a field of another kind is
// refused (told, rather than silently lost), then k plans it.
func Prepare(k Kind, s Spec, rnd *rand.Rand) (Plan, error) {
	present := map[string]bool{"stock": s.Stock != nil, "total_amount": s.TotalAmount != nil,
		"count": s.Count != nil, "min_amount": s.MinAmount != nil, "codes": s.Codes != nil}
	for _, f := range slices.Sorted(maps.Keys(present)) {
		if present[f] && !slices.Contains(k.Fields(), f) {
			return Plan{}, invalid(f, "%s is not a field of a %s voucher", f, k.Name())
		}
	}
	return k.Plan(s, rnd)
}

// Spec is the part of a voucher's creation request that differs by kind,
// with its JSON names (the gateway embeds it in the request, so a kind's
// new field is added here, and to Prepare's list). A field the kind does
// not take (Kind.Fields) must be absent.
type Spec struct {
	Stock       *int64   `json:"stock"`
	TotalAmount *int64   `json:"total_amount"`
	Count       *int64   `json:"count"`
	MinAmount   *int64   `json:"min_amount"`
	Codes       []string `json:"codes"`
}

// Plan is what a new voucher puts on sale.
type Plan struct {
	Stock       int64 // units (for a pool: items)
	TotalAmount int64 // envelopes: the amount split; 0 otherwise
	MinAmount   int64
	Items       []order.Item // numbered from 1; empty for units
}

// FieldError is a creation request a kind refuses.
type FieldError struct {
	Field   string
	Missing bool // the field is required and absent
	Msg     string
}

// Error names the field once: most messages begin with it already
// ("ends_at must be after starts_at").
func (e *FieldError) Error() string {
	if strings.HasPrefix(e.Msg, e.Field) {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

func missing(field string) error {
	return &FieldError{Field: field, Missing: true, Msg: field + " is required"}
}

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

func bounded(field string, v *int64, lo, hi int64) (int64, error) {
	if v == nil {
		return 0, missing(field)
	}
	if *v < lo || *v > hi {
		return 0, invalid(field, "%s must be between %s and %s", field, strconv.FormatInt(lo, 10), strconv.FormatInt(hi, 10))
	}
	return *v, nil
}

// Default is the kind of a voucher created without one.
const Default = "units"

var kinds = map[string]Kind{}

func register(k Kind) { kinds[k.Name()] = k }

// ErrUnknownKind is a kind no file here defines.
var ErrUnknownKind = errors.New("unknown kind of sale")

// Lookup returns the kind named name ("" is Default).
func Lookup(name string) (Kind, error) {
	if name == "" {
		name = Default
	}
	k, ok := kinds[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (one of %v)", ErrUnknownKind, name, Names())
	}
	return k, nil
}

// TraitsOf returns the traits of the kind named name; an unknown name (a
// row written by a newer version) has the traits of units.
func TraitsOf(name string) Traits {
	if k, err := Lookup(name); err == nil {
		return k.Traits()
	}
	return Traits{}
}

// Names lists the kinds, sorted.
func Names() []string {
	out := make([]string, 0, len(kinds))
	for n := range kinds {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// With lists the kinds whose traits satisfy pred, sorted.
func With(pred func(Traits) bool) []string {
	var out []string
	for _, n := range Names() {
		if pred(kinds[n].Traits()) {
			out = append(out, n)
		}
	}
	return out
}
