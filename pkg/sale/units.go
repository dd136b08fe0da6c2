package sale

import "math/rand/v2"

// MaxStock bounds the units of one voucher.
const MaxStock = 10_000_000

// units: N identical units, a claim takes 1 to per_user_limit of them, all
// or nothing; an order awaits payment and is cancelled, its units sold
// again, when unpaid in time.
type units struct{}

func init() { register(units{}) }

func (units) Name() string     { return "units" }
func (units) Traits() Traits   { return Traits{Spread: true, ToppedUp: true} }
func (units) Fields() []string { return []string{"stock"} }

func (units) Plan(s Spec, _ *rand.Rand) (Plan, error) {
	n, err := bounded("stock", s.Stock, 1, MaxStock)
	return Plan{Stock: n}, err
}
