package gateway_test

import (
	"cmp"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/payment"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/reaper"
	"github.com/flashsale/flashsale/pkg/worker"
)

const webhookSecret = "webhook-secret-webhook-secret-123"

// A paused sale refuses claims (409 paused) until resumed; the pause is in
// both stores, so reconcile finds nothing to repair.
func TestPauseAndResume(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"p","stock":5}`)
	res := f.do("POST", "/admin/v1/vouchers/"+id+"/pause", admin, "")
	require.Equal(t, http.StatusOK, res.Status, res.Raw)
	require.Equal(t, true, res.Body["paused"])
	requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("a"), ""), http.StatusConflict, "paused")
	checks, err := reaper.Reconcile(context.Background(), f.env.RDB, f.env.DB, time.Now(), false)
	require.NoError(t, err)
	require.Empty(t, checks[0].Differences)

	require.Equal(t, false, f.do("POST", "/admin/v1/vouchers/"+id+"/resume", admin, "").Body["paused"])
	require.Equal(t, http.StatusAccepted, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("a"), "").Status)
	requireError(t, f.do("POST", "/admin/v1/vouchers/999999/pause", admin, ""), http.StatusNotFound, "voucher_not_found")
	requireError(t, f.do("POST", "/admin/v1/vouchers/"+id+"/pause", f.token("a"), ""), http.StatusUnauthorized, "unauthorized")
}

func TestListVouchersInPages(t *testing.T) {
	f := newFixture(t)
	var ids []string
	for i := range 5 {
		ids = append(ids, f.createVoucher(`{"name":"v`+strconv.Itoa(i)+`","stock":1}`))
	}
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5)
		res := f.do("GET", "/admin/v1/vouchers?limit=2&after="+after, admin, "")
		require.Equal(t, http.StatusOK, res.Status, res.Raw)
		for _, v := range res.Body["vouchers"].([]any) {
			got = append(got, v.(map[string]any)["id"].(string))
		}
		next, ok := res.Body["next"].(string)
		if !ok {
			require.Nil(t, res.Body["next"])
			break
		}
		after = next
	}
	require.Equal(t, ids, got)
	requireError(t, f.do("GET", "/admin/v1/vouchers?limit=0", admin, ""), http.StatusBadRequest, "invalid_field")
	requireError(t, f.do("GET", "/admin/v1/vouchers?limit=501", admin, ""), http.StatusBadRequest, "invalid_field")
	requireError(t, f.do("GET", "/admin/v1/vouchers?after=x", admin, ""), http.StatusBadRequest, "invalid_field")
}

// A buyer lists their own orders of a voucher, pending ones included, and
// cancels an unpaid one: its unit is released once and sold again.
func TestBuyerListsAndCancelsOrders(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"c","stock":2,"per_user_limit":2}`)
	alice := f.token("alice")
	first := f.do("POST", "/v1/vouchers/"+id+"/orders", alice, "").Body["order_id"].(string)
	list := f.do("GET", "/v1/orders?voucher_id="+id, alice, "")
	require.Equal(t, http.StatusOK, list.Status, list.Raw)
	require.Len(t, list.Body["orders"], 1)
	require.Equal(t, "pending", list.Body["orders"].([]any)[0].(map[string]any)["status"])
	requireError(t, f.do("POST", "/v1/orders/"+first+"/cancel", alice, ""), http.StatusConflict, "order_pending")

	f.persist(id)
	second := f.do("POST", "/v1/vouchers/"+id+"/orders", alice, "").Body["order_id"].(string)
	list = f.do("GET", "/v1/orders?voucher_id="+id, alice, "")
	require.Len(t, list.Body["orders"], 2, "one persisted, one pending: %s", list.Raw)
	require.Empty(t, f.do("GET", "/v1/orders?voucher_id="+id, f.token("bob"), "").Body["orders"], "only one's own")
	requireError(t, f.do("GET", "/v1/orders", alice, ""), http.StatusBadRequest, "missing_field")
	requireError(t, f.do("GET", "/v1/orders?voucher_id=x", alice, ""), http.StatusBadRequest, "invalid_field")
	requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("bob"), ""), http.StatusConflict, "sold_out")

	requireError(t, f.do("POST", "/v1/orders/"+first+"/cancel", f.token("bob"), ""), http.StatusNotFound, "order_not_found")
	for range 2 { // cancelling twice answers the same, releases once
		res := f.do("POST", "/v1/orders/"+first+"/cancel", alice, "")
		require.Equal(t, http.StatusOK, res.Status, res.Raw)
		require.Equal(t, "cancelled", res.Body["status"])
	}
	status := f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
	require.EqualValues(t, 1, status.Body["remaining_redis"], "the unit is back in Redis, once")
	require.EqualValues(t, 2, status.Body["remaining_mysql"], "the second order is still pending: MySQL has not taken it yet")
	require.Equal(t, http.StatusAccepted, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("bob"), "").Status, "sold again")

	f.persist(id)
	require.Equal(t, http.StatusOK, f.do("POST", "/v1/orders/"+second+"/pay", alice, "").Status)
	requireError(t, f.do("POST", "/v1/orders/"+second+"/cancel", alice, ""), http.StatusConflict, "order_not_cancellable")
}

// The payment provider's webhook: signed, idempotent, and a payment for a
// cancelled order is recorded for a refund, never sold twice.
func TestPaymentWebhook(t *testing.T) {
	env := testenv.New(t, 2)
	f := newFixtureOn(t, env, gateway.Config{PaymentWebhookSecret: webhookSecret})
	id := f.createVoucher(`{"name":"w","stock":3,"payment_timeout_seconds":60}`)
	var orders []string
	for _, u := range []string{"a", "b"} {
		orders = append(orders, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token(u), "").Body["order_id"].(string))
	}
	hook := func(order, paymentID, signature string) response {
		body := `{"order_id":"` + order + `","payment_id":"` + paymentID + `"}`
		if signature == "" {
			signature = payment.Sign([]byte(body), webhookSecret, time.Now())
		}
		return f.do("POST", "/v1/payments/webhook", "", body, payment.Header, signature)
	}
	requireError(t, hook(orders[0], "pay-1", ""), http.StatusConflict, "order_pending")
	f.persist(id)
	// With a payment provider, a buyer cannot mark
	// their own order paid.
	requireError(t, f.do("POST", "/v1/orders/"+orders[1]+"/pay", f.token("b"), ""), http.StatusNotFound, "not_found")
	got := f.do("GET", "/v1/orders/"+orders[1], f.token("b"), "")
	require.Equal(t, "created", got.Body["status"], got.Raw)
	requireError(t, hook(orders[0], "pay-1", "sha256=00"), http.StatusUnauthorized, "unauthorized")
	requireError(t, hook(orders[0], "pay-1", "md5=00"), http.StatusUnauthorized, "unauthorized")
	for range 2 {
		res := hook(orders[0], "pay-1", "")
		require.Equal(t, http.StatusOK, res.Status, res.Raw)
		require.Equal(t, "paid", res.Body["status"])
		require.Equal(t, false, res.Body["refund_due"])
	}
	res := hook(orders[0], "pay-2", "")
	require.Equal(t, true, res.Body["refund_due"], "a second payment of a paid order is refunded")

	// b's order expires and is cancelled; its payment arrives late.
	r, err := reaper.New(reaper.Config{Config: worker.Config{Consumer: "reaper"}}, env.RDB, env.DB, zaptest.NewLogger(t),
		reaper.WithClock(func() time.Time { return f.clock.Now().Add(2 * time.Minute) }))
	require.NoError(t, err)
	_, err = r.RunOnce(context.Background())
	require.NoError(t, err)
	res = hook(orders[1], "pay-3", "")
	require.Equal(t, http.StatusOK, res.Status, res.Raw)
	require.Equal(t, "cancelled", res.Body["status"])
	require.Equal(t, true, res.Body["refund_due"])
	require.EqualValues(t, 2, env.Count(t, "SELECT COUNT(*) FROM late_payments"))
	requireError(t, hook("999999", "pay-4", ""), http.StatusNotFound, "order_not_found")
	requireError(t, hook("x", "pay-4", ""), http.StatusBadRequest, "invalid_field")
	requireError(t, hook(orders[1], "bad id!", ""), http.StatusBadRequest, "invalid_field")
	status := f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
	require.EqualValues(t, 2, status.Body["remaining_mysql"], "the late payment sold nothing")

	// Without a secret the webhook does not exist.
	plain := newFixture(t)
	requireError(t, plain.do("POST", "/v1/payments/webhook", "", `{}`), http.StatusNotFound, "not_found")
}

// /pay, where a buyer pays without paying, is off unless
// FLASHSALE_BUYER_PAY opens it, and cannot be opened beside a webhook.
func TestBuyerPayIsOffByDefault(t *testing.T) {
	env := testenv.New(t, 1)
	gw, err := gateway.New(gateway.Config{AdminToken: admin, JWTSecret: secret}, env.RDB, env.DB, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(gw.Close)
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(srv.Close)
	f := &fixture{t: t, env: env, srv: srv, clock: newClock(time.Now())}
	id := f.createVoucher(`{"name":"p","stock":1}`)
	o := f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("a"), "")
	require.Equal(t, http.StatusAccepted, o.Status, o.Raw)
	f.persist(id)
	requireError(t, f.do("POST", "/v1/orders/"+o.Body["order_id"].(string)+"/pay", f.token("a"), ""), http.StatusNotFound, "not_found")
	require.Equal(t, "created", f.do("GET", "/v1/orders/"+o.Body["order_id"].(string), f.token("a"), "").Body["status"])

	_, err = gateway.New(gateway.Config{AdminToken: admin, JWTSecret: secret, BuyerPay: true, PaymentWebhookSecret: webhookSecret}, nil, nil, nil)
	require.ErrorContains(t, err, "FLASHSALE_BUYER_PAY")
}

// An operator tops a sale up and extends it: the units are sold, in both
// stores alike; a change MySQL recorded but Redis never got (a crash
// between them) is applied by the reaper, once, and reconcile agrees.
func TestTopUpAndExtend(t *testing.T) {
	f := newFixture(t)
	ends := f.clock.Now().Add(time.Hour)
	id := f.createVoucher(`{"name":"t","stock":1,"ends_at":"` + ends.Format(time.RFC3339) + `"}`)
	require.Equal(t, http.StatusAccepted, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("a"), "").Status)
	requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("b"), ""), http.StatusConflict, "sold_out")

	later := ends.Add(time.Hour).UTC().Format(time.RFC3339)
	res := f.do("PATCH", "/admin/v1/vouchers/"+id, admin, `{"add_stock":2,"ends_at":"`+later+`"}`)
	require.Equal(t, http.StatusOK, res.Status, res.Raw)
	require.EqualValues(t, 3, res.Body["stock_total"])
	laterT, err := time.Parse(time.RFC3339, later)
	require.NoError(t, err)
	st, err := f.env.RDB.ReadVoucherState(context.Background(), parseID(t, id), nil)
	require.NoError(t, err)
	require.Equal(t, rdb.KeysExpireAt(laterT, 900*time.Second), st.Voucher.ExpireAt, "the keys outlive the new end and the payment window")
	require.Equal(t, http.StatusAccepted, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("b"), "").Status, "sold after the top-up")
	f.clock.Add(90 * time.Minute) // past the first end, before the new one
	require.Equal(t, http.StatusAccepted, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("c"), "").Status, "the sale was extended")
	requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("d"), ""), http.StatusConflict, "sold_out")

	// A change MySQL has and Redis not: the reaper applies it, once.
	ctx := context.Background()
	vid := parseID(t, id)
	evenLater := laterT.Add(time.Hour)
	_, _, err = f.env.DB.ChangeVoucher(ctx, vid, db.Edit{AddStock: 5, EndsAt: &evenLater}, f.clock.Now().UTC())
	require.NoError(t, err)
	r, err := reaper.New(reaper.Config{Config: worker.Config{Consumer: "reaper"}}, f.env.RDB, f.env.DB, zaptest.NewLogger(t), reaper.WithClock(f.clock.Now))
	require.NoError(t, err)
	for range 2 {
		_, err = r.RunOnce(ctx)
		require.NoError(t, err)
	}
	n, _, err := f.env.RDB.RemainingStock(ctx, vid)
	require.NoError(t, err)
	require.EqualValues(t, 5, n, "the owed top-up, applied once")
	st, err = f.env.RDB.ReadVoucherState(ctx, vid, nil)
	require.NoError(t, err)
	require.Equal(t, rdb.KeysExpireAt(evenLater, 900*time.Second), st.Voucher.ExpireAt, "the owed change's end, with the voucher's payment window")
	f.persist(id)
	checks, err := reaper.Reconcile(ctx, f.env.RDB, f.env.DB, f.clock.Now(), false)
	require.NoError(t, err)
	for _, c := range checks {
		require.Empty(t, c.Differences)
	}

	for name, tt := range map[string]struct {
		body, code string
		status     int
	}{
		"nothing to change":    {`{}`, "missing_field", 400},
		"zero stock":           {`{"add_stock":0}`, "invalid_field", 400},
		"negative stock":       {`{"add_stock":-1}`, "invalid_field", 400},
		"end in the past":      {`{"ends_at":"2020-01-01T00:00:00Z"}`, "invalid_field", 400}, // fixed date: refused before anything is stored.
		"end not a time":       {`{"ends_at":"soon"}`, "invalid_field", 400},
		"unknown field":        {`{"stock":3}`, "unknown_field", 400},
		"over the stock bound": {`{"add_stock":10000000}`, "invalid_field", 400},
	} {
		t.Run(name, func(t *testing.T) {
			requireError(t, f.do("PATCH", "/admin/v1/vouchers/"+id, admin, tt.body), tt.status, tt.code)
		})
	}
	envelopes := f.createVoucher(`{"name":"e","kind":"envelope","total_amount":100,"count":2}`)
	requireError(t, f.do("PATCH", "/admin/v1/vouchers/"+envelopes, admin, `{"add_stock":1}`), http.StatusConflict, "not_toppable")
	requireError(t, f.do("PATCH", "/admin/v1/vouchers/999999", admin, `{"add_stock":1}`), http.StatusNotFound, "voucher_not_found")
}

// The webhook's signature carries its time (t=, Stripe's convention): a
// captured request is refused once it is FLASHSALE_PAYMENT_WEBHOOK_TOLERANCE
// old, or as far ahead; the old body-only signature passes only while
// FLASHSALE_PAYMENT_WEBHOOK_LEGACY is on, counted in a metric.
func TestWebhookSignatureCarriesATime(t *testing.T) {
	env := testenv.New(t, 1)
	for _, legacy := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		f := newFixtureOn(t, env, gateway.Config{PaymentWebhookSecret: webhookSecret, PaymentWebhookLegacy: legacy}, gateway.WithRegistry(reg))
		id := f.createVoucher(`{"name":"w","stock":5,"per_user_limit":1}`)
		order := f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("a"), "").Body["order_id"].(string)
		f.persist(id)
		body := `{"order_id":"` + order + `","payment_id":"p-1"}`
		hook := func(signature, b string) response {
			return f.do("POST", "/v1/payments/webhook", "", b, payment.Header, signature)
		}
		now := f.clock.Now()
		sign := func(at time.Time) string { return payment.Sign([]byte(body), webhookSecret, at) }
		requireError(t, hook(sign(now.Add(-6*time.Minute)), body), http.StatusUnauthorized, "unauthorized")
		requireError(t, hook(sign(now.Add(6*time.Minute)), body), http.StatusUnauthorized, "unauthorized")
		requireError(t, hook(sign(now), strings.Replace(body, "p-1", "p-2", 1)), http.StatusUnauthorized, "unauthorized")
		requireError(t, hook("t=abc,sha256=00", body), http.StatusUnauthorized, "unauthorized")
		requireError(t, hook("t="+strconv.FormatInt(now.Unix(), 10), body), http.StatusUnauthorized, "unauthorized")
		requireError(t, hook("garbage", body), http.StatusUnauthorized, "unauthorized")
		old := payment.SignLegacy([]byte(body), webhookSecret)
		if !legacy {
			requireError(t, hook(old, body), http.StatusUnauthorized, "unauthorized")
			// A provider rolling its secret sends two signatures: one matches.
			other := payment.Sign([]byte(body), "another-secret-another-secret-12", now)
			_, otherSig, _ := strings.Cut(other, ",")
			res := hook(sign(now.Add(-4*time.Minute))+","+otherSig, body)
			require.Equal(t, http.StatusOK, res.Status, res.Raw)
			require.Equal(t, "paid", res.Body["status"])
			require.Zero(t, testenv.Metric(t, reg, "flashsale_payment_webhooks_legacy_total"))
			continue
		}
		res := hook(old, body)
		require.Equal(t, http.StatusOK, res.Status, res.Raw)
		require.Equal(t, "paid", res.Body["status"])
		require.EqualValues(t, 1, testenv.Metric(t, reg, "flashsale_payment_webhooks_legacy_total"))
	}
}

// Every operator action through the admin API is on the record: one log
// line whose msg names it, with the voucher, who and the fields before →
// after, and a row of the voucher's history (GET /admin/v1/vouchers/{id},
// newest first). A pause of a paused voucher changes nothing and records
// nothing.
func TestEveryOperatorActionIsOnTheRecord(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	f := newFixtureLogging(t, testenv.New(t, 4), gateway.Config{}, zap.New(core))
	id := f.createVoucher(`{"name":"lamp","stock":5}`)
	for _, path := range []string{"/pause", "/pause", "/resume"} {
		require.Equal(t, http.StatusOK, f.do("POST", "/admin/v1/vouchers/"+id+path, admin, "").Status)
	}
	end := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second).Format(time.RFC3339)
	res := f.do("PATCH", "/admin/v1/vouchers/"+id, admin, `{"add_stock":10,"ends_at":"`+end+`"}`, "Content-Type", "application/json")
	require.Equal(t, http.StatusOK, res.Status, res.Raw)
	res = f.do("PATCH", "/admin/v1/vouchers/"+id, admin, `{"stock_buckets":2}`, "Content-Type", "application/json")
	require.Equal(t, http.StatusOK, res.Status, res.Raw)

	want := [][3]string{ // action, before, after; oldest first
		{"voucher created", "", "kind=units stock_total=5 per_user_limit=1"},
		{"voucher paused", "paused=false", "paused=true"},
		{"voucher resumed", "paused=true", "paused=false"},
		{"stock added", "stock_total=5", "stock_total=15"},
		{"end moved", "ends_at=none", "ends_at=" + end},
		{"split asked", "stock_buckets=1", "stock_buckets=2"},
	}
	var lines [][3]string
	for _, e := range logs.All() {
		m := e.ContextMap()
		if _, ok := m["by"]; !ok {
			continue
		}
		require.Equal(t, zapcore.InfoLevel, e.Level)
		require.Equal(t, "admin", m["by"], e.Message)
		require.EqualValues(t, parseID(t, id), m["voucher_id"], e.Message)
		lines = append(lines, [3]string{e.Message, m["before"].(string), m["after"].(string)})
	}
	require.Equal(t, want, lines, "one line an action, in the order they were done")

	res = f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
	require.Equal(t, http.StatusOK, res.Status, res.Raw)
	var history [][3]string
	for _, h := range res.Body["history"].([]any) {
		a := h.(map[string]any)
		require.Equal(t, "admin", a["by"])
		at, err := time.Parse(time.RFC3339Nano, a["at"].(string))
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), at, time.Hour)
		before, _ := a["before"].(string)
		history = append([][3]string{{a["action"].(string), before, a["after"].(string)}}, history...)
	}
	require.Equal(t, want, history, "the voucher's history, newest first")
}

// A person who opens the gateway's address finds a page that says it is
// up and links the console, the API's reference (served, the repository's
// own) and a queue page; any other unknown path is still a JSON 404.
func TestTheGatewaysIndexLinksWhereToGo(t *testing.T) {
	f := newFixture(t)
	res, err := http.Get(f.srv.URL + "/")
	require.NoError(t, err)
	page, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"))
	for _, link := range []string{`href="/admin/console"`, `href="/openapi.yaml"`, `href="/queue/1"`} {
		require.Contains(t, string(page), link)
	}
	res, err = http.Get(f.srv.URL + "/openapi.yaml")
	require.NoError(t, err)
	spec, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	want, err := os.ReadFile("../../api/openapi.yaml")
	require.NoError(t, err)
	require.Equal(t, string(want), string(spec))
	for _, path := range []string{f.srv.URL + "/admin/console", f.srv.URL + "/queue/1"} {
		res, err := http.Get(path)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, path)
	}
	requireError(t, f.do("GET", "/nothing-here", "", ""), http.StatusNotFound, "not_found")
	requireError(t, f.do("POST", "/", "", ""), http.StatusNotFound, "not_found")
}

// A creation sent again under its Idempotency-Key (a double submit, a
// retry after a lost answer, eight at once) makes one sale, and the later
// sends are answered 200 with it; a refused field is named in "field".
func TestACreationSentTwiceMakesOneSale(t *testing.T) {
	f := newFixture(t)
	create := func(body, key string) response {
		return f.do("POST", "/admin/v1/vouchers", admin, body, "Content-Type", "application/json", "Idempotency-Key", key)
	}
	first := create(`{"name":"lamp","stock":5}`, "form-1")
	require.Equal(t, http.StatusCreated, first.Status, first.Raw)
	again := create(`{"name":"lamp, edited","stock":9}`, "form-1")
	require.Equal(t, http.StatusOK, again.Status, again.Raw)
	require.Equal(t, first.Body["id"], again.Body["id"])
	require.Equal(t, "lamp", again.Body["name"], "the voucher the first made")

	ids := make(chan any, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			res := create(`{"name":"desk","stock":3}`, "form-2")
			if res.Status != http.StatusCreated && res.Status != http.StatusOK {
				t.Errorf("%d %s", res.Status, res.Raw)
			}
			ids <- res.Body["id"]
		})
	}
	wg.Wait()
	close(ids)
	var desk any
	for id := range ids {
		desk = cmp.Or(desk, id)
		require.Equal(t, desk, id, "one voucher for one key")
	}
	list := f.do("GET", "/admin/v1/vouchers", admin, "")
	require.Len(t, list.Body["vouchers"], 2, list.Raw)
	history := f.do("GET", "/admin/v1/vouchers/"+desk.(string), admin, "").Body["history"].([]any)
	require.Len(t, history, 1, "created once")

	requireError(t, create(`{"name":"x","stock":1}`, "has space"), http.StatusBadRequest, "invalid_idempotency_key")
	for body, field := range map[string]string{`{"stock":5}`: "name", `{"name":"x","stock":5,"ends_at":"soon"}`: "ends_at", `{"name":"x","stock":0}`: "stock"} {
		res := create(body, "form-3")
		require.Equal(t, http.StatusBadRequest, res.Status, body)
		require.Equal(t, field, res.Body["field"], body)
	}
	require.Equal(t, http.StatusCreated, create(`{"name":"x","stock":1}`, "form-3").Status, "a refused creation took no key")
}
