package gateway_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/payment"
)

// A sale with known outcomes: five units sold out to five buyers, two more
// refused sold_out and one refused user_limit; two paid, two cancelled by
// their buyers (one of whom pays late) and resold to the two refused. The
// report states each of these, and the times come from the orders' rows.
func TestSaleReport(t *testing.T) {
	env := testenv.New(t, 2)
	f := newFixtureOn(t, env, gateway.Config{PaymentWebhookSecret: webhookSecret})
	tick := func() { f.clock.Set(time.Now().UTC().Truncate(time.Millisecond)) }
	tick()
	id := f.createVoucher(`{"name":"report","stock":5,"per_user_limit":1,"payment_timeout_seconds":600}`)
	vid := parseID(t, id)
	claim := func(user string) response {
		tick()
		return f.do("POST", "/v1/vouchers/"+id+"/orders", f.token(user), "")
	}
	orders := map[string]string{}
	for _, u := range []string{"u1", "u2", "u3", "u4", "u5"} {
		res := claim(u)
		require.Equal(t, http.StatusAccepted, res.Status, res.Raw)
		orders[u] = res.Body["order_id"].(string)
		if u == "u1" {
			requireError(t, claim("u1"), http.StatusConflict, "user_limit")
		}
	}
	requireError(t, claim("u6"), http.StatusConflict, "sold_out")
	requireError(t, claim("u7"), http.StatusConflict, "sold_out")
	f.persist(id) // the five wait in the stream together: the largest backlog

	hook := func(order, paymentID string) response {
		body := `{"order_id":"` + order + `","payment_id":"` + paymentID + `"}`
		return f.do("POST", "/v1/payments/webhook", "", body, payment.Header, payment.Sign([]byte(body), webhookSecret, time.Now()))
	}
	for _, u := range []string{"u1", "u2"} {
		require.Equal(t, "paid", hook(orders[u], "pay-"+u).Body["status"])
	}
	for _, u := range []string{"u3", "u4"} {
		tick()
		res := f.do("POST", "/v1/orders/"+orders[u]+"/cancel", f.token(u), "")
		require.Equal(t, "cancelled", res.Body["status"], res.Raw)
	}
	require.Equal(t, true, hook(orders["u3"], "pay-late").Body["refund_due"])
	for _, u := range []string{"u6", "u7"} {
		res := claim(u)
		require.Equal(t, http.StatusAccepted, res.Status, "resold: %s", res.Raw)
		orders[u] = res.Body["order_id"].(string)
	}
	f.persist(id)

	// What the rows say, read here on their own.
	type row struct {
		ID                     int64
		CreatedAt, PersistedAt time.Time
	}
	var rows []row
	require.NoError(t, env.DB.DB().Raw("SELECT id, created_at, persisted_at FROM orders WHERE voucher_id = ? ORDER BY created_at, id", vid).Scan(&rows).Error)
	require.Len(t, rows, 7)
	byID := map[string]row{}
	var maxLag time.Duration
	for _, r := range rows {
		byID[strconv.FormatInt(r.ID, 10)] = r
		maxLag = max(maxLag, r.PersistedAt.Sub(r.CreatedAt))
	}
	var created time.Time
	require.NoError(t, env.DB.DB().Raw("SELECT created_at FROM vouchers WHERE id = ?", vid).Scan(&created).Error)

	res := f.do("GET", "/admin/v1/vouchers/"+id+"/report", admin, "")
	require.Equal(t, http.StatusOK, res.Status, res.Raw)
	r := res.Body
	at := func(field string, m map[string]any) time.Time {
		s, ok := m[field].(string)
		require.True(t, ok, "%s: %s", field, res.Raw)
		v, err := time.Parse(time.RFC3339Nano, s)
		require.NoError(t, err)
		return v
	}
	require.Equal(t, id, r["voucher_id"])
	require.Equal(t, "units", r["kind"])
	require.True(t, created.Equal(at("opened_at", r)), "no starts_at: opened when created")
	require.True(t, byID[orders["u1"]].CreatedAt.Equal(at("first_admission_at", r)))
	require.True(t, byID[orders["u7"]].CreatedAt.Equal(at("last_admission_at", r)))
	soldOut := byID[orders["u5"]].CreatedAt
	require.True(t, soldOut.Equal(at("sold_out_at", r)), "the fifth unit sold it out: %s", res.Raw)
	require.EqualValues(t, soldOut.Sub(created).Milliseconds(), r["time_to_sell_out_ms"])
	require.EqualValues(t, 5, r["stock_total"])
	require.EqualValues(t, 0, r["topped_up_units"])
	require.EqualValues(t, 0, r["unsold_units"])
	require.EqualValues(t, 7, r["admitted_orders"])
	require.EqualValues(t, 7, r["admitted_units"])
	require.EqualValues(t, 7, r["distinct_buyers"])
	require.Equal(t, map[string]any{"created": 3.0, "paid": 2.0, "completed": 0.0, "cancelled": 2.0, "failed": 0.0}, r["orders"])
	require.InDelta(t, 2.0/7, r["paid_share"], 1e-9)
	require.EqualValues(t, 2, r["released_units"])
	require.Equal(t, map[string]any{"cancelled_by_user": 2.0}, r["released_by_reason"])
	require.EqualValues(t, 2, r["resold_units"])
	require.Empty(t, r["failed_by_reason"])
	require.EqualValues(t, 0, r["dead_letters"])
	require.EqualValues(t, 1, r["late_payments"])
	require.Nil(t, r["grabbed_amount"], "units have no amounts")

	p := r["persistence"].(map[string]any)
	require.EqualValues(t, 7, p["orders"])
	require.EqualValues(t, 0, p["unknown"])
	require.EqualValues(t, maxLag.Milliseconds(), p["max_lag_ms"])
	require.EqualValues(t, maxLag.Milliseconds(), p["p99_lag_ms"], "seven orders: the 99th percentile is the largest")
	require.LessOrEqual(t, p["mean_lag_ms"].(float64), p["max_lag_ms"].(float64))
	require.EqualValues(t, 5, p["largest_backlog"], "the five admitted before the first persist")
	require.True(t, soldOut.Equal(at("largest_backlog_at", p)))

	refused := r["refused_claims"].(map[string]any)
	require.NotEmpty(t, refused["replica"])
	require.False(t, at("since", refused).After(time.Now()))
	require.Equal(t, map[string]any{"sold_out": 2.0, "user_limit": 1.0}, refused["by_reason"])

	// A sale that has not sold out, and one nobody claimed yet.
	unsold := f.createVoucher(`{"name":"unsold","stock":5}`)
	empty := f.do("GET", "/admin/v1/vouchers/"+unsold+"/report", admin, "")
	require.Equal(t, http.StatusOK, empty.Status, empty.Raw)
	require.Nil(t, empty.Body["first_admission_at"])
	require.Nil(t, empty.Body["sold_out_at"])
	require.Nil(t, empty.Body["paid_share"])
	require.Nil(t, empty.Body["persistence"].(map[string]any)["largest_backlog_at"])
	require.Equal(t, http.StatusAccepted, f.do("POST", "/v1/vouchers/"+unsold+"/orders", f.token("u1"), "").Status)
	claimed := f.do("GET", "/admin/v1/vouchers/"+unsold+"/report", admin, "")
	require.Equal(t, http.StatusOK, claimed.Status, claimed.Raw)
	require.Nil(t, claimed.Body["sold_out_at"], "4 of 5 units left")
	require.EqualValues(t, 0, claimed.Body["admitted_orders"], "not persisted yet: the report is MySQL's")

	// A pool of codes: sold out by its second grab, each code once.
	codes := f.createVoucher(`{"name":"codes","kind":"codes","codes":["A-1","B-2"]}`)
	for _, u := range []string{"c1", "c2", "c3"} {
		tick()
		f.do("POST", "/v1/vouchers/"+codes+"/orders", f.token(u), "")
	}
	f.persist(codes)
	cr := f.do("GET", "/admin/v1/vouchers/"+codes+"/report", admin, "")
	require.Equal(t, http.StatusOK, cr.Status, cr.Raw)
	require.Equal(t, "codes", cr.Body["kind"])
	require.EqualValues(t, 2, cr.Body["admitted_orders"])
	require.EqualValues(t, 0, cr.Body["unsold_units"])
	require.NotNil(t, cr.Body["sold_out_at"])
	require.Equal(t, map[string]any{"sold_out": 1.0}, cr.Body["refused_claims"].(map[string]any)["by_reason"])
	require.InDelta(t, 0, cr.Body["paid_share"], 1e-9, "codes are paid for; none was yet")

	requireError(t, f.do("GET", "/admin/v1/vouchers/999999/report", admin, ""), http.StatusNotFound, "voucher_not_found")
	requireError(t, f.do("GET", "/admin/v1/vouchers/x/report", admin, ""), http.StatusBadRequest, "invalid_id")
	requireError(t, f.do("GET", "/admin/v1/vouchers/"+id+"/report", f.token("u1"), ""), http.StatusUnauthorized, "unauthorized")
}
