package gateway_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/flashsale/flashsale/pkg/reaper"
	"github.com/flashsale/flashsale/pkg/settle"
	"github.com/flashsale/flashsale/pkg/worker"
)

// A red envelope sale through the API: created from a total and a count,
// grabbed one per user, each grab answered with its amount and completed
// once persisted; the admin GET follows the money.
func TestEnvelopeSale(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"lucky","kind":"envelope","total_amount":1000,"count":5,"min_amount":10}`)
	v := f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
	require.Equal(t, "envelope", v.Body["kind"])
	require.EqualValues(t, 5, v.Body["stock_total"])
	require.EqualValues(t, 1000, v.Body["total_amount"])
	require.EqualValues(t, 1000, v.Body["remaining_amount"])
	require.EqualValues(t, 0, v.Body["refunded_amount"])

	var grabbed float64
	ids := map[string]string{}
	for _, u := range []string{"a", "b", "c"} {
		res := f.do("POST", "/v1/vouchers/"+id+"/orders", f.token(u), "")
		require.Equal(t, http.StatusAccepted, res.Status, res.Raw)
		amount := res.Body["amount"].(float64)
		require.GreaterOrEqual(t, amount, 10.0)
		grabbed += amount
		ids[u] = res.Body["order_id"].(string)
		got := f.do("GET", "/v1/orders/"+ids[u], f.token(u), "")
		require.Equal(t, "pending", got.Body["status"])
		require.Equal(t, amount, got.Body["amount"])
	}
	requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("a"), ""), http.StatusConflict, "user_limit")
	requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("d"), `{"quantity":2}`), http.StatusBadRequest, "invalid_field")

	f.persist(id)
	got := f.do("GET", "/v1/orders/"+ids["a"], f.token("a"), "")
	require.Equal(t, "completed", got.Body["status"], got.Raw)
	require.Nil(t, got.Body["expires_at"], "a grab never expires")
	requireError(t, f.do("POST", "/v1/orders/"+ids["a"]+"/pay", f.token("a"), ""), http.StatusConflict, "order_not_payable")

	v = f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
	require.EqualValues(t, 2, v.Body["remaining_redis"])
	require.EqualValues(t, 2, v.Body["remaining_mysql"])
	require.EqualValues(t, 1000-grabbed, v.Body["remaining_amount"])
	require.EqualValues(t, 3, v.Body["orders"].(map[string]any)["completed"])
}

// When an envelope sale ends, the reaper refunds what nobody grabbed, once,
// even with two reapers, and only after the grabs in flight landed.
func TestEndedEnvelopeSaleIsRefundedOnce(t *testing.T) {
	f := newFixture(t)
	ends := f.clock.Now().Add(time.Hour).Format(time.RFC3339)
	id := f.createVoucher(`{"name":"lucky","kind":"envelope","total_amount":500,"count":5,"ends_at":"` + ends + `"}`)
	res := f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("a"), "")
	require.Equal(t, http.StatusAccepted, res.Status, res.Raw)
	grabbed := int64(res.Body["amount"].(float64))

	after := func() time.Time { return f.clock.Now().Add(2 * time.Hour) }
	reapers := make([]*reaper.Reaper, 2)
	for i := range reapers {
		r, err := reaper.New(reaper.Config{Config: worker.Config{Consumer: "reaper-" + strconv.Itoa(i)}}, f.env.RDB, f.env.DB, zaptest.NewLogger(t), reaper.WithClock(after))
		require.NoError(t, err)
		reapers[i] = r
	}
	// The grab is still in the stream: the pool closes, the refund waits.
	results, err := reapers[0].RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, results.Refunder.RefundsWaiting)
	require.Zero(t, results.Refunder.Refunded)
	requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("b"), ""), http.StatusConflict, "sold_out")

	f.persist(id)
	refunded := 0
	for _, r := range reapers {
		results, err := r.RunOnce(context.Background())
		require.NoError(t, err)
		refunded += results.Refunder.Refunded
	}
	require.Equal(t, 1, refunded)
	v := f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
	require.EqualValues(t, 500-grabbed, v.Body["refunded_amount"])
	require.EqualValues(t, 0, v.Body["remaining_amount"])
	require.EqualValues(t, 0, v.Body["remaining_redis"])
	require.EqualValues(t, 0, v.Body["remaining_mysql"])

	checks, err := reaper.Reconcile(context.Background(), f.env.RDB, f.env.DB, after(), false)
	require.NoError(t, err)
	for _, c := range checks {
		require.Empty(t, c.Differences, "voucher %d", c.VoucherID)
	}
}

// A pool of codes: each admission takes one code, shown to its owner once
// paid; an order cancelled unpaid gives its code back, and it is sold again.
func TestCodeSale(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"gift","kind":"codes","codes":["GIFT-1","GIFT-2"],"payment_timeout_seconds":60}`)
	a := f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("a"), "")
	require.Equal(t, http.StatusAccepted, a.Status, a.Raw)
	require.Nil(t, a.Body["code"], "no code before payment")
	b := f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("b"), "")
	require.Equal(t, http.StatusAccepted, b.Status, b.Raw)
	requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("c"), ""), http.StatusConflict, "sold_out")
	f.persist(id)

	aID, bID := a.Body["order_id"].(string), b.Body["order_id"].(string)
	got := f.do("GET", "/v1/orders/"+aID, f.token("a"), "")
	require.Equal(t, "created", got.Body["status"])
	require.Nil(t, got.Body["code"], "not paid: no code")
	paid := f.do("POST", "/v1/orders/"+aID+"/pay", f.token("a"), "")
	require.Equal(t, http.StatusOK, paid.Status, paid.Raw)
	require.Equal(t, "GIFT-1", paid.Body["code"])
	requireError(t, f.do("GET", "/v1/orders/"+aID, f.token("b"), ""), http.StatusNotFound, "order_not_found")

	// b never pays: cancelled, GIFT-2 back in the pool, and c gets it.
	later := func() time.Time { return f.clock.Now().Add(2 * time.Minute) }
	r, err := reaper.New(reaper.Config{Config: worker.Config{Consumer: "reaper"}}, f.env.RDB, f.env.DB, zaptest.NewLogger(t), reaper.WithClock(later))
	require.NoError(t, err)
	results, err := r.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, results.Expirer.Cancelled)
	require.Equal(t, 1, results.Releaser.ReleasedToRedis)
	c := f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("c"), "")
	require.Equal(t, http.StatusAccepted, c.Status, c.Raw)
	f.persist(id)
	paid = f.do("POST", "/v1/orders/"+c.Body["order_id"].(string)+"/pay", f.token("c"), "")
	require.Equal(t, http.StatusOK, paid.Status, paid.Raw)
	require.Equal(t, "GIFT-2", paid.Body["code"], "the cancelled order's code, sold again")
	cancelled := f.do("GET", "/v1/orders/"+bID, f.token("b"), "")
	require.Equal(t, "cancelled", cancelled.Body["status"])
	require.Nil(t, cancelled.Body["code"])

	live := f.env.Count(t, "SELECT COUNT(DISTINCT item) FROM orders WHERE voucher_id = ? AND status IN ('created','paid')", parseID(t, id))
	require.EqualValues(t, 2, live, "two live orders, two distinct codes")
}

// 100,000 codes in one request (the largest pool) are accepted and all
// put on sale: by the creation, or, where it outlasted its deadline
// (operator.CreateTimeout: seen on a loaded machine, the race detector
// on), by the reaper's round over what MySQL owes Redis (settle.Owed),
// as the creation's answer promises.
func TestTheLargestPoolOfCodes(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 100,000 rows")
	}
	f := newFixture(t)
	codes := make([]string, 100_000)
	for i := range codes {
		codes[i] = `"C` + strconv.Itoa(i) + strings.Repeat("x", 56) + `"`
	}
	// Sent as a client should: under an Idempotency-Key, and again on a
	// 503 (on a machine at load 27 the 100,000 inserts outran the
	// creation's 30 s, and the transaction was rolled back).
	body := `{"name":"big","kind":"codes","codes":[` + strings.Join(codes, ",") + `]}`
	var res response
	for range 3 {
		res = f.do("POST", "/admin/v1/vouchers", admin, body, "Content-Type", "application/json", "Idempotency-Key", "big-pool")
		if res.Status != http.StatusServiceUnavailable {
			break
		}
		t.Logf("the creation answered %s: sent again", res.Raw)
	}
	require.Contains(t, []int{http.StatusCreated, http.StatusOK}, res.Status, res.Raw)
	id := res.Body["id"].(string)
	v := f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
	if v.Body["remaining_redis"] == nil {
		t.Log("the creation left the voucher's Redis side to the reaper; its round now")
		_, err := settle.Owed(context.Background(), f.env.RDB, f.env.DB, 100, 0, time.Now)
		require.NoError(t, err)
		v = f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
	}
	require.EqualValues(t, 100_000, v.Body["remaining_redis"])
	require.EqualValues(t, 100_000, v.Body["remaining_mysql"])
}
