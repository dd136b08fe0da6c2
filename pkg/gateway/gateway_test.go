package gateway_test

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/internal/testclock"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/persist"
)

func TestMain(m *testing.M) { testsrv.Main(m) }

const (
	secret = "test-secret-test-secret-test-secret!"
	admin  = "admin-token-admin-token-admin-token"
)

// clock is a settable time for the gateway under test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time)     { c.mu.Lock(); c.t = t; c.mu.Unlock() }
func newClock(t time.Time) *clock    { return &clock{t: t} }
func (c *clock) Add(d time.Duration) { c.Set(c.Now().Add(d)) }

// followTime has f's gateway clock follow time, every 20 ms, until the
// test ends: a waiting room admits as time goes.
func (f *fixture) followTime() {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			f.clock.Set(time.Now().UTC())
			time.Sleep(20 * time.Millisecond) // the clock's step, not a wait for anything
		}
	}()
	f.t.Cleanup(func() { stop(); <-done })
}

type fixture struct {
	t     *testing.T
	env   *testenv.Env
	srv   *httptest.Server
	clock *clock
	gw    *gateway.Gateway
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureOn(t, testenv.New(t, 4), gateway.Config{})
}

// newFixtureOn is newFixture over env, with cfg's non-zero fields.
func newFixtureOn(t *testing.T, env *testenv.Env, cfg gateway.Config, opts ...gateway.Option) *fixture {
	t.Helper()
	return newFixtureLogging(t, env, cfg, zaptest.NewLogger(t), opts...)
}

// newFixtureLogging is newFixtureOn with the gateway logging to log.
func newFixtureLogging(t *testing.T, env *testenv.Env, cfg gateway.Config, log *zap.Logger, opts ...gateway.Option) *fixture {
	t.Helper()
	clk := newClock(time.Now().UTC().Truncate(time.Millisecond))
	cfg.AdminToken, cfg.JWTSecret = admin, secret
	cfg.BuyerPay = cfg.PaymentWebhookSecret == "" // buyers pay in tests without a payment provider
	if cfg.ClaimTimeout == 0 {
		cfg.ClaimTimeout = 500 * time.Millisecond
	}
	// The user rate and sold-out pruning answer before the script; the
	// fixture's tests read the script's answers, so both are off unless
	// a test sets them (limit_test.go and prune_test.go do).
	cfg.UserRate = cmp.Or(cfg.UserRate, -1)
	cfg.SoldOutRefresh = cmp.Or(cfg.SoldOutRefresh, -1)
	gw, err := gateway.New(cfg, env.RDB, env.DB, log, append([]gateway.Option{gateway.WithClock(clk.Now)}, opts...)...)
	require.NoError(t, err)
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(gw.Close)
	return &fixture{t: t, env: env, srv: srv, clock: clk, gw: gw}
}

type response struct {
	Status int
	Header http.Header
	Body   map[string]any
	Raw    string
}

func (f *fixture) do(method, path, token, body string, header ...string) response {
	f.t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	require.NoError(f.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(f.t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(f.t, err)
	out := response{Status: res.StatusCode, Header: res.Header, Raw: string(raw)}
	require.Equal(f.t, "application/json", res.Header.Get("Content-Type"), "every answer is JSON: %s", raw)
	require.NoError(f.t, json.Unmarshal(raw, &out.Body), "body %q", raw)
	return out
}

func (f *fixture) token(user string) string {
	tok, err := gateway.SignUserToken(secret, user, f.clock.Now().Add(time.Hour))
	require.NoError(f.t, err)
	return tok
}

func (f *fixture) createVoucher(body string) string {
	f.t.Helper()
	res := f.do("POST", "/admin/v1/vouchers", admin, body, "Content-Type", "application/json")
	require.Equal(f.t, http.StatusCreated, res.Status, res.Raw)
	return res.Body["id"].(string)
}

// persist has a worker persist what the partitions of voucher id (its
// buckets') hold.
func (f *fixture) persist(id string) {
	f.t.Helper()
	w := persist.NewOrders(persist.Config{Consumer: "w"}, f.env.RDB, f.env.DB, zaptest.NewLogger(f.t), nil, nil)
	ps, err := f.env.RDB.ReadVoucherPartitions(context.Background(), parseID(f.t, id))
	require.NoError(f.t, err)
	for _, p := range ps {
		entries, err := f.env.RDB.ReadGroup(context.Background(), p, "w", ">", 100, 10*time.Millisecond)
		require.NoError(f.t, err)
		require.NoError(f.t, w.Handle(context.Background(), entries))
	}
}

func requireError(t *testing.T, res response, status int, code string) {
	t.Helper()
	require.Equal(t, status, res.Status, res.Raw)
	require.Equal(t, code, res.Body["error"], res.Raw)
	require.NotEmpty(t, res.Body["message"], res.Raw)
}

func TestClaimToPaidOrder(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"coffee","stock":3,"per_user_limit":1,"payment_timeout_seconds":600}`)
	alice := f.token("alice")

	res := f.do("POST", "/v1/vouchers/"+id+"/orders", alice, "")
	require.Equal(t, http.StatusAccepted, res.Status, res.Raw)
	require.Equal(t, "pending", res.Body["status"])
	orderID := res.Body["order_id"].(string)

	requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", alice, ""), http.StatusConflict, "user_limit")

	got := f.do("GET", "/v1/orders/"+orderID, alice, "")
	require.Equal(t, http.StatusOK, got.Status, got.Raw)
	require.Equal(t, map[string]any{"order_id": orderID, "voucher_id": id, "user_id": "alice", "quantity": 1.0, "status": "pending", "created_at": got.Body["created_at"]}, got.Body)
	requireError(t, f.do("GET", "/v1/orders/"+orderID, f.token("mallory"), ""), http.StatusNotFound, "order_not_found")
	requireError(t, f.do("POST", "/v1/orders/"+orderID+"/pay", alice, ""), http.StatusConflict, "order_pending")

	// A worker persists it.
	f.persist(id)

	got = f.do("GET", "/v1/orders/"+orderID, alice, "")
	require.Equal(t, "created", got.Body["status"], got.Raw)
	requireError(t, f.do("POST", "/v1/orders/"+orderID+"/pay", f.token("mallory"), ""), http.StatusNotFound, "order_not_found")
	for range 2 { // paying twice is harmless
		paid := f.do("POST", "/v1/orders/"+orderID+"/pay", alice, "")
		require.Equal(t, http.StatusOK, paid.Status, paid.Raw)
		require.Equal(t, "paid", paid.Body["status"])
	}

	status := f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
	require.Equal(t, http.StatusOK, status.Status, status.Raw)
	require.EqualValues(t, 3, status.Body["stock_total"])
	require.EqualValues(t, 2, status.Body["remaining_redis"])
	require.EqualValues(t, 2, status.Body["remaining_mysql"])
	require.Equal(t, map[string]any{"created": 0.0, "paid": 1.0, "cancelled": 0.0, "failed": 0.0, "completed": 0.0}, status.Body["orders"])
	require.EqualValues(t, 0, status.Body["stream"].(map[string]any)["length"])
}

func TestPaymentAfterTheDeadlineIsRefused(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"late","stock":2,"payment_timeout_seconds":60}`)
	tok := f.token("lena")
	res := f.do("POST", "/v1/vouchers/"+id+"/orders", tok, "")
	require.Equal(t, http.StatusAccepted, res.Status)
	f.persist(id)

	f.clock.Add(61 * time.Second)
	requireError(t, f.do("POST", "/v1/orders/"+res.Body["order_id"].(string)+"/pay", tok, ""), http.StatusConflict, "payment_expired")
}

func TestIdempotencyKeyReplaysTheAdmission(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"tea","stock":5,"per_user_limit":3}`)
	bob := f.token("bob")
	first := f.do("POST", "/v1/vouchers/"+id+"/orders", bob, "", "Idempotency-Key", "req-1")
	again := f.do("POST", "/v1/vouchers/"+id+"/orders", bob, "", "Idempotency-Key", "req-1")
	require.Equal(t, http.StatusAccepted, again.Status)
	require.Equal(t, first.Body["order_id"], again.Body["order_id"])
	other := f.do("POST", "/v1/vouchers/"+id+"/orders", bob, "", "Idempotency-Key", "req-2")
	require.NotEqual(t, first.Body["order_id"], other.Body["order_id"])
	status := f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
	require.EqualValues(t, 3, status.Body["remaining_redis"])
	requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", bob, "", "Idempotency-Key", "has space"), http.StatusBadRequest, "invalid_idempotency_key")
}

func TestSaleWindowAndStockRejections(t *testing.T) {
	f := newFixture(t)
	start := f.clock.Now().Add(time.Hour)
	id := f.createVoucher(`{"name":"w","stock":1,"starts_at":"` + start.Format(time.RFC3339) + `","ends_at":"` + start.Add(time.Hour).Format(time.RFC3339) + `"}`)
	claim := func(user string) response { return f.do("POST", "/v1/vouchers/"+id+"/orders", f.token(user), "") }
	requireError(t, claim("a"), http.StatusConflict, "not_started")
	f.clock.Set(start)
	require.Equal(t, http.StatusAccepted, claim("a").Status)
	requireError(t, claim("b"), http.StatusConflict, "sold_out")
	f.clock.Set(start.Add(time.Hour))
	requireError(t, claim("c"), http.StatusConflict, "ended")
	requireError(t, f.do("POST", "/v1/vouchers/999999/orders", f.token("a"), ""), http.StatusNotFound, "voucher_not_found")
}

func TestDailyLimitThroughTheAPI(t *testing.T) {
	f := newFixture(t)
	f.clock.Set(testclock.BeforeMidnight(time.UTC, time.Minute))
	id := f.createVoucher(`{"name":"d","stock":10,"per_user_limit":5,"per_user_daily_limit":1}`)
	claim := func() response { return f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("dora"), "") }
	require.Equal(t, http.StatusAccepted, claim().Status)
	requireError(t, claim(), http.StatusConflict, "daily_limit")
	f.clock.Add(2 * time.Minute) // past midnight UTC
	require.Equal(t, http.StatusAccepted, claim().Status)
}

func TestBadTokens(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"t","stock":5}`)
	sign := func(method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(method, claims).SignedString(key)
		require.NoError(t, err)
		return s
	}
	exp := f.clock.Now().Add(time.Hour).Unix()
	tests := []struct {
		name, token string
	}{
		{"missing", ""},
		{"garbage", "not-a-jwt"},
		{"wrong secret", sign(jwt.SigningMethodHS256, []byte("another-secret-another-secret-1234"), jwt.MapClaims{"sub": "u", "exp": exp})},
		{"expired", sign(jwt.SigningMethodHS256, []byte(secret), jwt.MapClaims{"sub": "u", "exp": f.clock.Now().Add(-time.Minute).Unix()})},
		{"no exp", sign(jwt.SigningMethodHS256, []byte(secret), jwt.MapClaims{"sub": "u"})},
		{"unsigned (alg none)", sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.MapClaims{"sub": "u", "exp": exp})},
		{"HS512 not accepted", sign(jwt.SigningMethodHS512, []byte(secret), jwt.MapClaims{"sub": "u", "exp": exp})},
		{"no sub", sign(jwt.SigningMethodHS256, []byte(secret), jwt.MapClaims{"exp": exp})},
		{"sub with a colon", sign(jwt.SigningMethodHS256, []byte(secret), jwt.MapClaims{"sub": "a:b", "exp": exp})},
		{"admin token as user", admin},
		{"lifetime over 24h", sign(jwt.SigningMethodHS256, []byte(secret), jwt.MapClaims{"sub": "u", "exp": f.clock.Now().Add(48 * time.Hour).Unix()})},
		{"exp in year 9999", sign(jwt.SigningMethodHS256, []byte(secret), jwt.MapClaims{"sub": "u", "exp": 253402300000})},
		{"nbf overflowing", sign(jwt.SigningMethodHS256, []byte(secret), jwt.MapClaims{"sub": "u", "exp": exp, "nbf": 1e300})},
		{"crit header", func() string {
			tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "u", "exp": exp})
			tok.Header["crit"] = []string{"x"}
			s, err := tok.SignedString([]byte(secret))
			require.NoError(t, err)
			return s
		}()},
		{"unknown kid (no key set)", func() string {
			tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"sub": "u", "exp": exp})
			tok.Header["kid"] = "k1"
			_, key, err := ed25519.GenerateKey(nil)
			require.NoError(t, err)
			s, err := tok.SignedString(key)
			require.NoError(t, err)
			return s
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", tt.token, ""), http.StatusUnauthorized, "unauthorized")
		})
	}
	requireError(t, f.do("POST", "/admin/v1/vouchers", f.token("u"), `{"name":"x","stock":1}`), http.StatusUnauthorized, "unauthorized")
	requireError(t, f.do("GET", "/admin/v1/vouchers/"+id, "wrong", ""), http.StatusUnauthorized, "unauthorized")
	status := f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
	require.EqualValues(t, 5, status.Body["remaining_redis"], "no bad token took anything")
}

func TestBadVoucherInputWritesNothing(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name, body, contentType string
		status                  int
		code                    string
	}{
		{"malformed json", `{"name":`, "application/json", 400, "malformed_json"},
		{"empty body", ``, "", 400, "malformed_json"},
		{"not an object", `[1,2]`, "", 400, "invalid_field"},
		{"trailing data", `{"name":"a","stock":1} {}`, "", 400, "malformed_json"},
		{"unknown field", `{"name":"a","stock":1,"price":3}`, "", 400, "unknown_field"},
		{"missing stock", `{"name":"a"}`, "", 400, "missing_field"},
		{"negative stock", `{"name":"a","stock":-1}`, "", 400, "invalid_field"},
		{"zero stock", `{"name":"a","stock":0}`, "", 400, "invalid_field"},
		{"huge stock", `{"name":"a","stock":100000000000}`, "", 400, "invalid_field"},
		{"stock past int64", `{"name":"a","stock":1e30}`, "", 400, "invalid_field"},
		{"fractional stock", `{"name":"a","stock":1.5}`, "", 400, "invalid_field"},
		{"stock as string", `{"name":"a","stock":"5"}`, "", 400, "invalid_field"},
		{"no name", `{"stock":5}`, "", 400, "invalid_field"},
		{"zero user limit", `{"name":"a","stock":5,"per_user_limit":0}`, "", 400, "invalid_field"},
		{"negative daily limit", `{"name":"a","stock":5,"per_user_daily_limit":-1}`, "", 400, "invalid_field"},
		{"bad time", `{"name":"a","stock":5,"starts_at":"tomorrow"}`, "", 400, "invalid_field"},
		{"ends before start", `{"name":"a","stock":5,"starts_at":"2126-01-02T00:00:00Z","ends_at":"2126-01-01T00:00:00Z"}`, "", 400, "invalid_field"},
		{"ends at start", `{"name":"a","stock":5,"starts_at":"2126-01-02T00:00:00Z","ends_at":"2126-01-02T00:00:00Z"}`, "", 400, "invalid_field"},
		{"already over", `{"name":"a","stock":5,"ends_at":"2020-01-01T00:00:00Z"}`, "", 400, "invalid_field"}, // fixed date: refused before anything is stored.
		{"ends before 1970", `{"name":"a","stock":5,"ends_at":"1969-12-31T23:59:59Z"}`, "", 400, "invalid_field"},
		{"starts in year 1", `{"name":"a","stock":5,"starts_at":"0001-01-01T00:00:00Z"}`, "", 400, "invalid_field"},
		{"starts at the epoch", `{"name":"a","stock":5,"starts_at":"1970-01-01T00:00:00Z"}`, "", 400, "invalid_field"},
		{"ends past 9999 by offset", `{"name":"a","stock":5,"ends_at":"9999-12-31T23:00:00-05:00"}`, "", 400, "invalid_field"},
		{"zero payment timeout", `{"name":"a","stock":5,"payment_timeout_seconds":0}`, "", 400, "invalid_field"},
		{"unknown kind", `{"name":"a","kind":"lottery","stock":5}`, "", 400, "invalid_field"},
		{"kind as number", `{"name":"a","kind":1,"stock":5}`, "", 400, "invalid_field"},
		{"units with codes", `{"name":"a","stock":5,"codes":["A"]}`, "", 400, "invalid_field"},
		{"envelope with stock", `{"name":"a","kind":"envelope","stock":5,"total_amount":100,"count":5}`, "", 400, "invalid_field"},
		{"envelope without total", `{"name":"a","kind":"envelope","count":5}`, "", 400, "missing_field"},
		{"envelope without count", `{"name":"a","kind":"envelope","total_amount":100}`, "", 400, "missing_field"},
		{"envelope of zero count", `{"name":"a","kind":"envelope","total_amount":100,"count":0}`, "", 400, "invalid_field"},
		{"envelope count too large", `{"name":"a","kind":"envelope","total_amount":1000000,"count":100001}`, "", 400, "invalid_field"},
		{"envelope floor above the average", `{"name":"a","kind":"envelope","total_amount":10,"count":5,"min_amount":3}`, "", 400, "invalid_field"},
		{"envelope of zero floor", `{"name":"a","kind":"envelope","total_amount":10,"count":5,"min_amount":0}`, "", 400, "invalid_field"},
		{"envelope fractional amount", `{"name":"a","kind":"envelope","total_amount":10.5,"count":5}`, "", 400, "invalid_field"},
		{"envelope negative amount", `{"name":"a","kind":"envelope","total_amount":-10,"count":5}`, "", 400, "invalid_field"},
		{"codes missing", `{"name":"a","kind":"codes"}`, "", 400, "missing_field"},
		{"codes empty", `{"name":"a","kind":"codes","codes":[]}`, "", 400, "invalid_field"},
		{"codes repeated", `{"name":"a","kind":"codes","codes":["A-1","A-1"]}`, "", 400, "invalid_field"},
		{"code with a space", `{"name":"a","kind":"codes","codes":["A 1"]}`, "", 400, "invalid_field"},
		{"code with a bar", `{"name":"a","kind":"codes","codes":["A|1"]}`, "", 400, "invalid_field"},
		{"code too long", `{"name":"a","kind":"codes","codes":["` + strings.Repeat("x", 65) + `"]}`, "", 400, "invalid_field"},
		{"code empty", `{"name":"a","kind":"codes","codes":[""]}`, "", 400, "invalid_field"},
		{"code as number", `{"name":"a","kind":"codes","codes":[12]}`, "", 400, "invalid_field"},
		{"oversized body", `{"name":"` + strings.Repeat("x", 9<<20) + `","stock":1}`, "", 413, "body_too_large"},
		{"wrong content type", `{"name":"a","stock":1}`, "text/plain", 415, "unsupported_media_type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h []string
			if tt.contentType != "" {
				h = []string{"Content-Type", tt.contentType}
			}
			requireError(t, f.do("POST", "/admin/v1/vouchers", admin, tt.body, h...), tt.status, tt.code)
		})
	}
	require.Zero(t, f.env.Count(t, "SELECT COUNT(*) FROM vouchers"), "nothing written")
	keys, err := f.env.RDB.Client().Keys(context.Background(), "flashsale:*:v:*").Result()
	require.NoError(t, err)
	require.Empty(t, keys)
}

func TestBadPathsAndMethods(t *testing.T) {
	f := newFixture(t)
	alice := f.token("alice")
	for _, p := range []string{"abc", "0", "-1", "1.5", "99999999999999999999999", "+5"} {
		requireError(t, f.do("POST", "/v1/vouchers/"+p+"/orders", alice, ""), http.StatusBadRequest, "invalid_id")
		requireError(t, f.do("GET", "/v1/orders/"+p, alice, ""), http.StatusBadRequest, "invalid_id")
		requireError(t, f.do("POST", "/v1/orders/"+p+"/pay", alice, ""), http.StatusBadRequest, "invalid_id")
		requireError(t, f.do("GET", "/admin/v1/vouchers/"+p, admin, ""), http.StatusBadRequest, "invalid_id")
	}
	requireError(t, f.do("GET", "/v1/orders/12345", alice, ""), http.StatusNotFound, "order_not_found")
	requireError(t, f.do("POST", "/v1/orders/12345/pay", alice, ""), http.StatusNotFound, "order_not_found")
	requireError(t, f.do("GET", "/admin/v1/vouchers/12345", admin, ""), http.StatusNotFound, "voucher_not_found")
	res := f.do("GET", "/v1/vouchers/1/orders", alice, "")
	requireError(t, res, http.StatusMethodNotAllowed, "method_not_allowed")
	require.Equal(t, "POST", res.Header.Get("Allow"))
	requireError(t, f.do("GET", "/nope", "", ""), http.StatusNotFound, "not_found")
}

func TestClaimFailsFastWhenRedisIsDown(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"r","stock":5}`)
	require.NoError(t, f.env.Redis.Kill())
	start := time.Now()
	res := f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("u"), "")
	requireError(t, res, http.StatusServiceUnavailable, "unavailable")
	require.Equal(t, "1", res.Header.Get("Retry-After"))
	require.Less(t, time.Since(start), 10*time.Second, "bounded by the claim timeout, not a hang (loose: a loaded machine is slow, a hang is for ever)")
	// Back up, the gateway answers again. This Redis keeps nothing on disk, so
	// the voucher is gone with it, and so is the partition's loaded mark:
	// an outage until the reaper rebuilds it, never admitted blind, and
	// not a voucher that does not exist.
	require.NoError(t, f.env.Redis.Start())
	requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("u"), ""), http.StatusServiceUnavailable, "unavailable")
}

func parseID(t *testing.T, s string) int64 {
	var n int64
	require.NoError(t, json.Unmarshal([]byte(s), &n))
	return n
}

// Issuer and audience, when configured, are enforced on the HTTP path too.
func TestIssuerAndAudienceAreEnforced(t *testing.T) {
	f := newFixtureOn(t, testenv.New(t, 2), gateway.Config{JWTIssuer: "https://id.example", JWTAudience: "flashsale"})
	id := f.createVoucher(`{"name":"t","stock":5}`)
	exp := f.clock.Now().Add(time.Hour).Unix()
	tok := func(claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
		require.NoError(t, err)
		return s
	}
	good := tok(jwt.MapClaims{"sub": "u", "exp": exp, "iss": "https://id.example", "aud": "flashsale"})
	require.Equal(t, http.StatusAccepted, f.do("POST", "/v1/vouchers/"+id+"/orders", good, "").Status)
	for name, bad := range map[string]string{
		"wrong issuer":   tok(jwt.MapClaims{"sub": "v", "exp": exp, "iss": "https://evil.example", "aud": "flashsale"}),
		"wrong audience": tok(jwt.MapClaims{"sub": "v", "exp": exp, "iss": "https://id.example", "aud": "shop"}),
		"no issuer":      tok(jwt.MapClaims{"sub": "v", "exp": exp, "aud": "flashsale"}),
	} {
		t.Run(name, func(t *testing.T) {
			requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", bad, ""), http.StatusUnauthorized, "unauthorized")
		})
	}
}

// With FLASHSALE_ADMIN_ADDR the admin API lives on its own listener: the
// public one answers 404 there. Failed admin logins are throttled per
// address, and the right token still works for others.
func TestAdminSurface(t *testing.T) {
	env := testenv.New(t, 2)
	clk := newClock(time.Now().UTC()) // frozen: no try is earned back during the test
	gw, err := gateway.New(gateway.Config{AdminToken: admin, JWTSecret: secret, AdminAddr: "127.0.0.1:0"}, env.RDB, env.DB, zaptest.NewLogger(t),
		gateway.WithClock(clk.Now))
	require.NoError(t, err)
	t.Cleanup(gw.Close)
	pub, adm := httptest.NewServer(gw.Handler()), httptest.NewServer(gw.AdminHandler())
	t.Cleanup(pub.Close)
	t.Cleanup(adm.Close)
	f := &fixture{t: t, env: env, srv: pub, clock: clk}
	requireError(t, f.do("POST", "/admin/v1/vouchers", admin, `{"name":"x","stock":1}`), http.StatusNotFound, "not_found")
	requireError(t, f.do("GET", "/admin/v1/vouchers/1", admin, ""), http.StatusNotFound, "not_found")

	a := &fixture{t: t, env: env, srv: adm, clock: f.clock}
	id := a.createVoucher(`{"name":"x","stock":1}`)
	requireError(t, a.do("POST", "/v1/vouchers/"+id+"/orders", f.token("u"), ""), http.StatusNotFound, "not_found")
	require.Equal(t, http.StatusAccepted, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("u"), "").Status)

	// Ten wrong tokens, then the address's wrong tokens are answered 429
	// until a try is earned back; the right token is never throttled
	// (an operator behind the attacker's NAT, or a
	// port-forward, was locked out).
	wrong := "wrong-wrong-wrong-wrong-wrong-wrong"
	for range 10 {
		requireError(t, a.do("GET", "/admin/v1/vouchers/"+id, wrong, ""), http.StatusUnauthorized, "unauthorized")
	}
	for range 3 {
		res := a.do("GET", "/admin/v1/vouchers/"+id, wrong, "")
		requireError(t, res, http.StatusTooManyRequests, "rate_limited")
		require.NotEmpty(t, res.Header.Get("Retry-After"))
		require.Equal(t, http.StatusOK, a.do("GET", "/admin/v1/vouchers/"+id, admin, "").Status, "the right token is never throttled")
	}
	clk.Add(7 * time.Second)
	requireError(t, a.do("GET", "/admin/v1/vouchers/"+id, wrong, ""), http.StatusUnauthorized, "unauthorized")
}

// An admin token shorter than 32 bytes is refused at start.
func TestShortAdminTokenIsRefused(t *testing.T) {
	_, err := gateway.New(gateway.Config{AdminToken: "short", JWTSecret: secret}, nil, nil, nil)
	require.ErrorContains(t, err, "FLASHSALE_ADMIN_TOKEN")
}
