package gateway_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// A claim may take several units: {"quantity": N}, all or nothing, N
// counted against the per-user limit; the order shows its quantity from
// pending to persisted.
func TestClaimOfSeveralUnits(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"multi","stock":10,"per_user_limit":4}`)
	alice := f.token("alice")

	res := f.do("POST", "/v1/vouchers/"+id+"/orders", alice, `{"quantity":3}`, "Content-Type", "application/json")
	require.Equal(t, http.StatusAccepted, res.Status, res.Raw)
	orderID := res.Body["order_id"].(string)
	got := f.do("GET", "/v1/orders/"+orderID, alice, "")
	require.Equal(t, "pending", got.Body["status"])
	require.EqualValues(t, 3, got.Body["quantity"])

	requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", alice, `{"quantity":2}`), http.StatusConflict, "user_limit")
	res = f.do("POST", "/v1/vouchers/"+id+"/orders", alice, `{}`)
	require.Equal(t, http.StatusAccepted, res.Status, "no quantity is 1: %s", res.Raw)
	requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("bob"), `{"quantity":7}`), http.StatusBadRequest, "invalid_field")
	res = f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("bob"), `{"quantity":4}`)
	require.Equal(t, http.StatusAccepted, res.Status, res.Raw)
	requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("carol"), `{"quantity":3}`), http.StatusConflict, "sold_out")

	f.persist(id)
	got = f.do("GET", "/v1/orders/"+orderID, alice, "")
	require.Equal(t, "created", got.Body["status"], got.Raw)
	require.EqualValues(t, 3, got.Body["quantity"])

	status := f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
	require.EqualValues(t, 2, status.Body["remaining_redis"])
	require.EqualValues(t, 2, status.Body["remaining_mysql"], "MySQL took 3 + 1 + 4 units")
}

// Quantities that are not whole numbers from 1 to the per-user limit are
// 400 invalid_field, and take nothing.
func TestBadQuantitiesTakeNothing(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"multi","stock":10,"per_user_limit":4}`)
	for i, tt := range []struct{ name, body, code string }{
		{"zero", `{"quantity":0}`, "invalid_field"},
		{"negative", `{"quantity":-2}`, "invalid_field"},
		{"fraction", `{"quantity":1.5}`, "invalid_field"},
		{"string", `{"quantity":"2"}`, "invalid_field"},
		{"above the per-user limit", `{"quantity":5}`, "invalid_field"},
		{"above any limit", `{"quantity":1000000}`, "invalid_field"},
		{"past int64", `{"quantity":1e30}`, "invalid_field"},
		{"null", `{"quantity":null}`, ""}, // no quantity: 1 (checked below)
		{"unknown field", `{"qty":2}`, "unknown_field"},
		{"not an object", `[2]`, "invalid_field"},
		{"malformed", `{"quantity":`, "malformed_json"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("u"+strconv.Itoa(i)), tt.body)
			if tt.code == "" {
				require.Equal(t, http.StatusAccepted, res.Status, res.Raw)
				return
			}
			requireError(t, res, http.StatusBadRequest, tt.code)
		})
	}
	status := f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
	require.EqualValues(t, 9, status.Body["remaining_redis"], "only the null quantity took a unit")
	require.Equal(t, int64(0), f.env.Count(t, "SELECT COUNT(*) FROM orders"))
}
