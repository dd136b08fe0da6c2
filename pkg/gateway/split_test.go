package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// PATCH stock_buckets asks for a voucher's buckets to be split while its
// sale runs (the reaper's splitter does it): the voucher answers with
// split_to. Lower than today's, not a multiple, above 64, on a draw, a
// pool or a voucher with a waiting room: 400 invalid_field naming
// stock_buckets, and nothing asked; so is one whose sale has ended.
func TestPatchStockBucketsAsksASplit(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"drop","stock":100,"stock_buckets":2}`)
	ends := f.clock.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	draw := f.createVoucher(`{"name":"draw","stock":5,"allocation":"draw","ends_at":"` + ends + `"}`)
	envelope := f.createVoucher(`{"name":"envelopes","kind":"envelope","total_amount":10000,"count":50}`)
	room := f.createVoucher(`{"name":"room","stock":5,"waiting_room":{"admit_per_second":5}}`)
	for _, c := range []struct{ id, body string }{
		{id, `{"stock_buckets":1}`},
		{id, `{"stock_buckets":2}`},
		{id, `{"stock_buckets":3}`},
		{id, `{"stock_buckets":66}`},
		{id, `{"stock_buckets":0}`},
		{draw, `{"stock_buckets":2}`},
		{envelope, `{"stock_buckets":2}`},
		{room, `{"stock_buckets":2}`},
	} {
		res := f.do("PATCH", "/admin/v1/vouchers/"+c.id, admin, c.body)
		requireError(t, res, http.StatusBadRequest, "invalid_field")
		require.True(t, strings.HasPrefix(res.Body["message"].(string), "stock_buckets"), res.Raw)
	}
	res := f.do("PATCH", "/admin/v1/vouchers/"+id, admin, `{"stock_buckets":8}`)
	require.Equal(t, http.StatusOK, res.Status, res.Raw)
	require.EqualValues(t, 2, res.Body["stock_buckets"], "its buckets now")
	require.EqualValues(t, 8, res.Body["split_to"], "the split under way")
	v, err := f.env.DB.Voucher(t.Context(), parseID(t, id))
	require.NoError(t, err)
	require.Equal(t, 8, v.SplitTo)
	requireError(t, f.do("PATCH", "/admin/v1/vouchers/"+id, admin, `{"stock_buckets":4}`), http.StatusBadRequest, "invalid_field")
	// With another change: both.
	res = f.do("PATCH", "/admin/v1/vouchers/"+id, admin, `{"add_stock":5,"stock_buckets":8}`)
	require.Equal(t, http.StatusOK, res.Status, res.Raw)
	require.EqualValues(t, 105, res.Body["stock"])
	require.EqualValues(t, 8, res.Body["split_to"])
	got := f.do("GET", "/admin/v1/vouchers/"+draw, admin, "")
	require.NotContains(t, got.Body, "split_to", "none asked")
	// Once its sale has ended, a voucher keeps its buckets.
	ending := f.createVoucher(`{"name":"ending","stock":5,"ends_at":"` + ends + `"}`)
	f.clock.Set(f.clock.Now().Add(2 * time.Hour))
	res = f.do("PATCH", "/admin/v1/vouchers/"+ending, admin, `{"stock_buckets":2}`)
	requireError(t, res, http.StatusBadRequest, "invalid_field")
	require.Contains(t, res.Body["message"], "ended")
}
