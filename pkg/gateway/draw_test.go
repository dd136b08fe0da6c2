package gateway_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/reaper"
	"github.com/flashsale/flashsale/pkg/worker"
)

// A draw sale through the API: entries (one per user, stock untouched),
// the commitment from the start, the draw after the end, the seed
// revealed, and each user's entry won or lost.
func TestADrawSaleThroughTheAPI(t *testing.T) {
	f := newFixture(t)
	ends := f.clock.Now().Add(time.Hour)
	endsAt := ends.Format(time.RFC3339Nano)
	for _, bad := range []struct{ body, code string }{
		{`{"name":"x","stock":2,"allocation":"lottery","ends_at":"` + endsAt + `"}`, "invalid_field"},
		{`{"name":"x","stock":2,"allocation":"draw"}`, "missing_field"},
		{`{"name":"x","stock":2,"allocation":"draw","per_user_limit":2,"ends_at":"` + endsAt + `"}`, "invalid_field"},
		{`{"name":"x","stock":2,"allocation":"draw","per_user_daily_limit":1,"ends_at":"` + endsAt + `"}`, "invalid_field"},
		{`{"name":"x","stock":2,"allocation":"draw","stock_buckets":4,"ends_at":"` + endsAt + `"}`, "invalid_field"},
		{`{"name":"x","kind":"envelope","total_amount":100,"count":2,"allocation":"draw","ends_at":"` + endsAt + `"}`, "invalid_field"},
	} {
		requireError(t, f.do("POST", "/admin/v1/vouchers", admin, bad.body), http.StatusBadRequest, bad.code)
	}
	created := f.do("POST", "/admin/v1/vouchers", admin, `{"name":"sneaker","stock":2,"allocation":"draw","payment_timeout_seconds":60,"ends_at":"`+endsAt+`"}`)
	require.Equal(t, http.StatusCreated, created.Status, created.Raw)
	id := created.Body["id"].(string)
	require.Equal(t, "draw", created.Body["allocation"])
	commitment := created.Body["seed_commitment"].(string)
	require.Len(t, commitment, 64)
	require.NotContains(t, created.Body, "seed", "the seed is secret until the draw")
	plain := f.createVoucher(`{"name":"plain","stock":2}`)
	require.Equal(t, "first_come", f.do("GET", "/admin/v1/vouchers/"+plain, admin, "").Body["allocation"])
	requireError(t, f.do("GET", "/v1/vouchers/"+plain+"/draw", f.token("a"), ""), http.StatusNotFound, "not_a_draw")

	entries := map[string]string{}
	for _, u := range []string{"a", "b", "c", "d", "e"} {
		res := f.do("POST", "/v1/vouchers/"+id+"/orders", f.token(u), "")
		require.Equal(t, http.StatusAccepted, res.Status, res.Raw)
		require.Equal(t, "entered", res.Body["status"])
		require.NotContains(t, res.Body, "order_id")
		entries[u] = res.Body["entry_id"].(string)
	}
	requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("a"), ""), http.StatusConflict, "already_entered")
	mine := f.do("GET", "/v1/orders?voucher_id="+id, f.token("a"), "")
	require.Equal(t, http.StatusOK, mine.Status, mine.Raw)
	listed := mine.Body["orders"].([]any)[0].(map[string]any)
	require.Equal(t, entries["a"], listed["order_id"])
	require.Equal(t, "entered", listed["status"])
	require.Equal(t, "entered", listed["draw"])

	d := f.do("GET", "/v1/vouchers/"+id+"/draw", f.token("z"), "")
	require.Equal(t, http.StatusOK, d.Status, d.Raw)
	require.Equal(t, "open", d.Body["state"])
	require.Equal(t, commitment, d.Body["seed_commitment"])
	require.NotContains(t, d.Body, "seed")
	f.persist(id)
	require.EqualValues(t, 0, f.do("GET", "/v1/vouchers/"+id+"/draw", f.token("z"), "").Body["entries"],
		"the figures are a copy a while old: one scan serves every caller")
	f.clock.Add(db.DrawFiguresMaxAge)
	require.EqualValues(t, 5, f.do("GET", "/v1/vouchers/"+id+"/draw", f.token("z"), "").Body["entries"])
	st := f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
	require.EqualValues(t, 2, st.Body["remaining_mysql"], "entries take no stock")
	require.EqualValues(t, 2, st.Body["remaining_redis"])

	f.clock.Set(ends.Add(time.Second))
	requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("f"), ""), http.StatusConflict, "ended")
	require.Equal(t, "drawing", f.do("GET", "/v1/vouchers/"+id+"/draw", f.token("z"), "").Body["state"])
	later := f.clock.Now().Add(time.Hour).Format(time.RFC3339)
	requireError(t, f.do("PATCH", "/admin/v1/vouchers/"+id, admin, `{"ends_at":"`+later+`"}`), http.StatusConflict, "draw_closed")

	r, err := reaper.New(reaper.Config{Config: worker.Config{Consumer: "reaper-0"}}, f.env.RDB, f.env.DB, zaptest.NewLogger(t),
		reaper.WithClock(func() time.Time { return ends.Add(time.Minute) }))
	require.NoError(t, err)
	results, err := r.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, results.Drawer.Drawn)

	d = f.do("GET", "/v1/vouchers/"+id+"/draw", f.token("z"), "")
	require.Equal(t, "drawn", d.Body["state"], d.Raw)
	require.EqualValues(t, 2, d.Body["winners"])
	seed, err := hex.DecodeString(d.Body["seed"].(string))
	require.NoError(t, err)
	sum := sha256.Sum256(seed)
	require.Equal(t, commitment, hex.EncodeToString(sum[:]), "the revealed seed is the one committed to")
	require.Equal(t, d.Body["seed"], f.do("GET", "/admin/v1/vouchers/"+id, admin, "").Body["seed"])

	won, lost := 0, 0
	for u, entry := range entries {
		o := f.do("GET", "/v1/orders/"+entry, f.token(u), "")
		require.Equal(t, http.StatusOK, o.Status, o.Raw)
		switch o.Body["draw"] {
		case "won":
			won++
			require.Equal(t, "created", o.Body["status"])
			require.Contains(t, o.Body, "expires_at")
			paid := f.do("POST", "/v1/orders/"+entry+"/pay", f.token(u), "")
			require.Equal(t, http.StatusOK, paid.Status, paid.Raw)
		case "lost":
			lost++
			require.Equal(t, "lost", o.Body["status"])
			requireError(t, f.do("POST", "/v1/orders/"+entry+"/pay", f.token(u), ""), http.StatusConflict, "order_not_payable")
		default:
			t.Fatalf("entry of %s: %s", u, o.Raw)
		}
	}
	require.Equal(t, 2, won)
	require.Equal(t, 3, lost)
	f.clock.Add(db.DrawFiguresMaxAge)
	require.EqualValues(t, 2, f.do("GET", "/v1/vouchers/"+id+"/draw", f.token("z"), "").Body["paid"])

	// The sale's report counts entries as admissions, and the paid share
	// of the orders the draw made; a draw never sells out.
	rep := f.do("GET", "/admin/v1/vouchers/"+id+"/report", admin, "")
	require.Equal(t, http.StatusOK, rep.Status, rep.Raw)
	require.EqualValues(t, 5, rep.Body["admitted_orders"])
	require.EqualValues(t, 1.0, rep.Body["paid_share"])
	require.EqualValues(t, 0, rep.Body["resold_units"])
	require.Nil(t, rep.Body["sold_out_at"])
	require.Equal(t, "drawn", f.do("GET", "/admin/v1/vouchers/"+id, admin, "").Body["draw"].(map[string]any)["state"])
}
