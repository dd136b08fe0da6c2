package sale

import (
	"math/rand/v2"

	"github.com/flashsale/flashsale/pkg/order"
)

// Bounds of an envelope voucher.
const (
	MaxEnvelopes = 100_000
	// MaxTotalAmount is ten billion in major units of a currency with
	// cents: far beyond any red envelope, far below int64.
	MaxTotalAmount = 1_000_000_000_000
)

// envelope: red envelopes (seed 002). A sender's total_amount is split when
// the voucher is created into count envelopes of different amounts; a grab
// takes one, needs no payment and is completed once persisted; what
// nobody grabbed is refunded to the sender when the sale is over.
type envelope struct{}

func init() { register(envelope{}) }

func (envelope) Name() string { return "envelope" }
func (envelope) Traits() Traits {
	return Traits{Pooled: true, NoPayment: true, RefundsAtEnd: true, Amounts: true}
}
func (envelope) Fields() []string { return []string{"total_amount", "count", "min_amount"} }

func (envelope) Plan(s Spec, rnd *rand.Rand) (Plan, error) {
	total, err := bounded("total_amount", s.TotalAmount, 1, MaxTotalAmount)
	if err != nil {
		return Plan{}, err
	}
	count, err := bounded("count", s.Count, 1, MaxEnvelopes)
	if err != nil {
		return Plan{}, err
	}
	floor := int64(1)
	if s.MinAmount != nil {
		if floor, err = bounded("min_amount", s.MinAmount, 1, MaxTotalAmount); err != nil {
			return Plan{}, err
		}
	}
	if count*floor > total {
		return Plan{}, invalid("total_amount", "total_amount %d cannot give %d envelopes at least min_amount %d each", total, count, floor)
	}
	amounts := Split(total, count, floor, rnd)
	items := make([]order.Item, count)
	for i, a := range amounts {
		items[i] = order.Item{No: int64(i + 1), Amount: a}
	}
	return Plan{Stock: count, TotalAmount: total, MinAmount: floor, Items: items}, nil
}

// Split divides total into count integer amounts, each at least floor,
// summing exactly to total (count*floor <= total), by the "twice the
// remaining average" rule: each envelope but the last gets floor plus a
// uniform draw from 0 to twice the average of what is left above the
// floors, so every envelope's expected amount is the same, total/count,
// whatever its place; the last takes the rest.
func Split(total, count, floor int64, rnd *rand.Rand) []int64 {
	out := make([]int64, count)
	spare := total - count*floor // what is left above the floors
	for i := range count - 1 {
		left := count - i
		// 0..2*spare/left: mean spare/left, and never more than spare
		// (left >= 2).
		x := rnd.Int64N(2*spare/left + 1)
		out[i] = floor + x
		spare -= x
	}
	out[count-1] = floor + spare
	return out
}
