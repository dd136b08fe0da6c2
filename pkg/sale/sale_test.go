package sale_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/sale"
)

func ptr(v int64) *int64 { return &v }

func TestSplitConservesTheTotalAboveTheFloor(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, tt := range []struct{ total, count, floor int64 }{
		{1, 1, 1}, {100, 100, 1}, {10_000, 7, 1}, {10_000, 7, 1000}, {1_000_000_000_000, 100_000, 1}, {99, 10, 9},
	} {
		for range 20 {
			out := sale.Split(tt.total, tt.count, tt.floor, rnd)
			require.Len(t, out, int(tt.count))
			var sum int64
			for _, a := range out {
				require.GreaterOrEqual(t, a, tt.floor, "%+v", tt)
				sum += a
			}
			require.Equal(t, tt.total, sum, "%+v", tt)
		}
	}
}

// "Twice the remaining average" gives every place in the draw the same
// expected amount: over many splits, the mean of each place is within a few
// percent of total/count (the seed is fixed, so this is not flaky).
func TestSplitIsFairWhateverThePlace(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 7))
	const total, count, runs = 10_000, 10, 20_000
	sums := make([]float64, count)
	for range runs {
		for i, a := range sale.Split(total, count, 1, rnd) {
			sums[i] += float64(a)
		}
	}
	for i, s := range sums {
		require.InEpsilon(t, float64(total)/count, s/runs, 0.03, "place %d", i)
	}
}

func TestPlans(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 1))
	env, err := sale.Lookup("envelope")
	require.NoError(t, err)
	p, err := env.Plan(sale.Spec{TotalAmount: ptr(1000), Count: ptr(10), MinAmount: ptr(50)}, rnd)
	require.NoError(t, err)
	require.EqualValues(t, 10, p.Stock)
	require.EqualValues(t, 1000, p.TotalAmount)
	var sum int64
	for i, it := range p.Items {
		require.EqualValues(t, i+1, it.No)
		require.GreaterOrEqual(t, it.Amount, int64(50))
		sum += it.Amount
	}
	require.EqualValues(t, 1000, sum)

	codes, err := sale.Lookup("codes")
	require.NoError(t, err)
	p, err = codes.Plan(sale.Spec{Codes: []string{"GIFT-1", "GIFT_2"}}, rnd)
	require.NoError(t, err)
	require.Equal(t, []order.Item{{No: 1, Code: "GIFT-1"}, {No: 2, Code: "GIFT_2"}}, p.Items)

	units, err := sale.Lookup("")
	require.NoError(t, err)
	require.Equal(t, "units", units.Name())
	p, err = units.Plan(sale.Spec{Stock: ptr(5)}, rnd)
	require.NoError(t, err)
	require.EqualValues(t, 5, p.Stock)
	require.Empty(t, p.Items)

	_, err = sale.Lookup("lottery")
	require.ErrorIs(t, err, sale.ErrUnknownKind)
	require.Equal(t, []string{"envelope"}, sale.With(func(t sale.Traits) bool { return t.RefundsAtEnd }))
}

func TestItemEncoding(t *testing.T) {
	for _, it := range []order.Item{{}, {No: 1, Amount: 250}, {No: 100000, Code: "A-b_9"}} {
		got, err := order.ParseItem(it.Encode())
		require.NoError(t, err)
		require.Equal(t, it, got)
	}
	for _, bad := range []string{"x", "1|2", "0|1|", "1|-1|", "1|1|a b", "a|1|"} {
		_, err := order.ParseItem(bad)
		require.ErrorIs(t, err, order.ErrBadItem, bad)
	}
}

// A refusal names its field once ("ends_at: ends_at must be…" named it
// twice in the CLI's messages).
func TestAFieldErrorNamesItsFieldOnce(t *testing.T) {
	for _, tc := range []struct {
		e    sale.FieldError
		want string
	}{
		{sale.FieldError{Field: "ends_at", Msg: "ends_at must be after starts_at"}, "ends_at must be after starts_at"},
		{sale.FieldError{Field: "stock_buckets", Msg: "stock_buckets: a split to 5 is under way"}, "stock_buckets: a split to 5 is under way"},
		{sale.FieldError{Field: "stock", Msg: "must be 1 or more"}, "stock: must be 1 or more"},
	} {
		require.Equal(t, tc.want, tc.e.Error())
	}
}
