package gateway_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The events API: each order's changes in their sequence, as CloudEvents
// carrying the order as GET /v1/orders/{id} shows it, a page at a time;
// bad paging is 400 invalid_field; only for the admin.
func TestTheEventsAPI(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"phone","stock":5}`)
	claim := func(user string) string {
		res := f.do("POST", "/v1/vouchers/"+id+"/orders", f.token(user), "")
		require.Equal(t, http.StatusAccepted, res.Status, res.Raw)
		return res.Body["order_id"].(string)
	}
	ann, ben := claim("ann"), claim("ben")
	f.persist(id)
	require.Equal(t, http.StatusOK, f.do("POST", "/v1/orders/"+ann+"/pay", f.token("ann"), "").Status)
	require.Equal(t, http.StatusOK, f.do("POST", "/v1/orders/"+ben+"/cancel", f.token("ben"), "").Status)
	list := func(query string) response {
		t.Helper()
		res := f.do("GET", "/admin/v1/events"+query, admin, "")
		require.Equal(t, http.StatusOK, res.Status, res.Raw)
		return res
	}
	require.Empty(t, list("").Body["events"], "not sequenced yet: not published")
	require.Equal(t, "0", list("").Body["next"])
	n, err := f.env.DB.SequenceEvents(context.Background(), 100)
	require.NoError(t, err)
	require.Equal(t, 4, n)

	all := list("?after=0").Body["events"].([]any)
	require.Len(t, all, 4)
	types := []string{}
	for i, raw := range all {
		ev := raw.(map[string]any)
		require.Equal(t, "1.0", ev["specversion"])
		require.Equal(t, "flashsale", ev["source"])
		require.Equal(t, "application/json", ev["datacontenttype"])
		require.Equal(t, []string{"1", "2", "3", "4"}[i], ev["sequence"])
		require.NotEmpty(t, ev["id"])
		_, err := time.Parse(time.RFC3339Nano, ev["time"].(string))
		require.NoError(t, err)
		data := ev["data"].(map[string]any)
		require.Equal(t, ev["subject"], data["order_id"])
		require.Equal(t, id, data["voucher_id"])
		types = append(types, ev["type"].(string)+" "+data["user_id"].(string))
	}
	require.Equal(t, []string{"order.created ann", "order.created ben", "order.paid ann", "order.cancelled ben"}, types)
	last := all[3].(map[string]any)["data"].(map[string]any)
	require.Equal(t, "cancelled", last["status"])
	require.Equal(t, "cancelled_by_user", last["reason"])
	// The paid event carries the order as the API shows it now.
	order := f.do("GET", "/v1/orders/"+ann, f.token("ann"), "")
	paid := all[2].(map[string]any)["data"].(map[string]any)
	for _, k := range []string{"order_id", "voucher_id", "user_id", "quantity", "status", "created_at", "expires_at", "paid_at"} {
		require.Equal(t, order.Body[k], paid[k], k)
	}

	page := list("?after=1&limit=2")
	require.Len(t, page.Body["events"], 2)
	require.Equal(t, "3", page.Body["next"])
	require.Equal(t, all[1], page.Body["events"].([]any)[0], "the same event, the same body")
	end := list("?after=4")
	require.Empty(t, end.Body["events"])
	require.Equal(t, "4", end.Body["next"], "nothing yet: ask again from the same place")

	for _, bad := range []string{"?after=x", "?after=-1", "?limit=0", "?limit=5000", "?limit=1.5"} {
		requireError(t, f.do("GET", "/admin/v1/events"+bad, admin, ""), http.StatusBadRequest, "invalid_field")
	}
	requireError(t, f.do("GET", "/admin/v1/events", f.token("ann"), ""), http.StatusUnauthorized, "unauthorized")
}

// GET /admin/v1/events/sinks: where each sink stands, as the relay left
// it; none before a reaper relays; only for the admin.
func TestTheSinksAPI(t *testing.T) {
	f := newFixture(t)
	res := f.do("GET", "/admin/v1/events/sinks", admin, "")
	require.Equal(t, http.StatusOK, res.Status, res.Raw)
	require.Equal(t, []any{}, res.Body["sinks"])
	id := f.createVoucher(`{"name":"phone","stock":5}`)
	for _, u := range []string{"ann", "ben", "cat"} {
		require.Equal(t, http.StatusAccepted, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token(u), "").Status)
	}
	f.persist(id)
	ctx := context.Background()
	_, held, err := f.env.DB.HoldSink(ctx, "kafka", "reaper-a", time.Minute) // starts at the last sequence: 0
	require.NoError(t, err)
	require.True(t, held)
	n, err := f.env.DB.SequenceEvents(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	moved, err := f.env.DB.AdvanceSink(ctx, "kafka", "reaper-a", 0, 1)
	require.NoError(t, err)
	require.True(t, moved)

	res = f.do("GET", "/admin/v1/events/sinks", admin, "")
	require.Equal(t, http.StatusOK, res.Status, res.Raw)
	require.Equal(t, 3.0, res.Body["published_up_to"])
	sinks := res.Body["sinks"].([]any)
	require.Len(t, sinks, 1)
	s := sinks[0].(map[string]any)
	require.Equal(t, "kafka", s["name"])
	require.Equal(t, 1.0, s["delivered_up_to"])
	require.Equal(t, 2.0, s["undelivered"])
	require.NotEmpty(t, s["oldest_undelivered"])
	require.Equal(t, "reaper-a", s["relayed_by"])
	requireError(t, f.do("GET", "/admin/v1/events/sinks", f.token("ann"), ""), http.StatusUnauthorized, "unauthorized")
}
