package voucher_test

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/draw"
	"github.com/flashsale/flashsale/pkg/sale"
	"github.com/flashsale/flashsale/pkg/voucher"
)

func request(t *testing.T, body string) voucher.Request {
	t.Helper()
	var req voucher.Request
	require.NoError(t, json.Unmarshal([]byte(body), &req))
	return req
}

// field is the field an error refuses, and whether it was missing; ""
// when it is no *sale.FieldError.
func field(err error) (string, bool) {
	var fe *sale.FieldError
	if errors.As(err, &fe) {
		return fe.Field, fe.Missing
	}
	return "", false
}

// Every refusal names its field; what passes is the voucher MySQL records.
func TestCreateRefusesByField(t *testing.T) {
	now := time.Now()
	rnd := rand.New(rand.NewPCG(1, 2))
	later := now.Add(time.Hour).UTC().Format(time.RFC3339)
	for _, c := range []struct {
		body, field string
		missing     bool
	}{
		{`{"name":" ","stock":1}`, "name", false},
		{`{"name":"a\u202e","stock":1}`, "name", false},
		{`{"name":"a","kind":"lottery"}`, "kind", false},
		{`{"name":"a"}`, "stock", true},
		{`{"name":"a","stock":1,"per_user_limit":0}`, "per_user_limit", false},
		{`{"name":"a","stock":1,"allocation":"draw"}`, "ends_at", true},
		{`{"name":"a","stock":1,"ends_at":"` + later + `","allocation":"draw","per_user_limit":2}`, "per_user_limit", false},
		{`{"name":"a","stock":1,"stock_buckets":2,"waiting_room":{"admit_per_second":10}}`, "stock_buckets", false},
		{`{"name":"a","stock":1,"proof_of_work":{"max_number":0}}`, "proof_of_work", false},
		{`{"name":"a","kind":"codes","codes":["A"],"stock_buckets":2}`, "stock_buckets", false},
	} {
		_, _, err := request(t, c.body).Create(now, rnd)
		f, missing := field(err)
		require.Equal(t, c.field, f, "%s: %v", c.body, err)
		require.Equal(t, c.missing, missing, c.body)
	}

	v, items, err := request(t, `{"name":"a","stock":3,"ends_at":"`+later+`","allocation":"draw"}`).Create(now, rnd)
	require.NoError(t, err)
	require.Empty(t, items)
	require.Equal(t, draw.Draw, v.Allocation)
	require.EqualValues(t, 1, v.PerUserLimit, "a draw is one entry per user")
	require.NotEmpty(t, v.SeedCommitment)
	require.Empty(t, voucher.Revealed(v), "the seed is hidden until drawn")
	require.EqualValues(t, voucher.DefaultPaymentTimeout, v.PaymentTimeoutSeconds)
}

// A change is checked without the voucher first, then against it.
func TestChangeIsCheckedAgainstTheVoucherAsItIs(t *testing.T) {
	now := time.Now()
	var c voucher.Change
	_, err := c.Edit(now)
	f, missing := field(err)
	require.Equal(t, "add_stock", f)
	require.True(t, missing, "an empty change names what it could hold")

	require.NoError(t, json.Unmarshal([]byte(`{"add_stock":5,"proof_of_work":null,"waiting_room":{"admit_per_second":10}}`), &c))
	e, err := c.Edit(now)
	require.NoError(t, err)
	require.EqualValues(t, 5, e.AddStock)
	require.NotNil(t, e.Pow)
	require.Zero(t, *e.Pow, "null turns the gate off")
	require.Nil(t, e.Room, "the room is read against the voucher")

	open := db.Voucher{StockTotal: 10, StockBuckets: 1}
	require.NoError(t, c.Against(open, &e, now))
	require.NotNil(t, e.Room)

	spread := db.Voucher{StockTotal: 10, StockBuckets: 4}
	f, _ = field(c.Against(spread, &e, now))
	require.Equal(t, "stock_buckets", f, "a room needs its stock in one bucket")

	ended := now.Add(-time.Minute)
	closed := db.Voucher{Allocation: draw.Draw, DrawState: draw.StateOpen, EndsAt: &ended}
	require.ErrorIs(t, c.Against(closed, &e, now), voucher.ErrDrawClosed)

	full := db.Voucher{StockTotal: sale.MaxStock}
	f, _ = field(c.Against(full, &e, now))
	require.Equal(t, "add_stock", f)
}
