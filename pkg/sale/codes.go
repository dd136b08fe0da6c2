package sale

import (
	"math/rand/v2"

	"github.com/flashsale/flashsale/pkg/order"
)

// MaxCodes bounds the codes of one voucher.
const MaxCodes = 100_000

// codes: a pool of distinct codes (gift cards, promo codes). An admission
// takes one code; the order awaits payment like units, and a cancelled
// order's code goes back to the pool to be sold again.
type codes struct{}

func init() { register(codes{}) }

func (codes) Name() string     { return "codes" }
func (codes) Traits() Traits   { return Traits{Pooled: true} }
func (codes) Fields() []string { return []string{"codes"} }

func (codes) Plan(s Spec, _ *rand.Rand) (Plan, error) {
	if s.Codes == nil {
		return Plan{}, missing("codes")
	}
	if len(s.Codes) < 1 || len(s.Codes) > MaxCodes {
		return Plan{}, invalid("codes", "codes must hold 1 to %d codes, got %d", MaxCodes, len(s.Codes))
	}
	seen := make(map[string]bool, len(s.Codes))
	items := make([]order.Item, len(s.Codes))
	for i, c := range s.Codes {
		if !order.ValidCode(c) {
			return Plan{}, invalid("codes", "codes[%d] must be 1-%d characters of A-Z a-z 0-9 - _", i, order.MaxCodeLen)
		}
		if seen[c] {
			return Plan{}, invalid("codes", "codes[%d] %q appears twice: codes must be distinct", i, c)
		}
		seen[c] = true
		items[i] = order.Item{No: int64(i + 1), Code: c}
	}
	return Plan{Stock: int64(len(items)), Items: items}, nil
}
