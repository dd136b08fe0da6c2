package apiclient_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/internal/apiclient"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/persist"
)

func TestMain(m *testing.M) { testsrv.Main(m) }

const (
	specPath = "../../../api/openapi.yaml"
	secret   = "test-secret-test-secret-test-secret!"
	admin    = "admin-token-admin-token-admin-token"
)

// client.gen.go is what the pinned oapi-codegen makes of api/openapi.yaml
// today: a spec change without go generate fails here.
func TestGeneratedClientIsCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the generator")
	}
	// The committed configuration, writing elsewhere (its output wins
	// over -o).
	dir := t.TempDir()
	out := filepath.Join(dir, "client.gen.go")
	cfg, err := os.ReadFile("oapi-codegen.yaml")
	require.NoError(t, err)
	cfg = bytes.Replace(cfg, []byte("output: client.gen.go"), []byte("output: "+out), 1)
	require.Contains(t, string(cfg), out)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cfg.yaml"), cfg, 0o644))
	cmd := exec.Command("go", "tool", "oapi-codegen", "-config", filepath.Join(dir, "cfg.yaml"), specPath)
	msg, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", msg)
	fresh, err := os.ReadFile(out)
	require.NoError(t, err)
	committed, err := os.ReadFile("client.gen.go")
	require.NoError(t, err)
	require.True(t, bytes.Equal(fresh, committed), "client.gen.go is stale: run go generate ./pkg/internal/apiclient")
}

// specChecker is an http.RoundTripper that checks every request and every
// answer against api/openapi.yaml (kin-openapi's openapi3filter): an
// answer the spec does not describe (a status, a field, a type, a
// required field missing, an extra one where the schema forbids them)
// fails the test.
type specChecker struct {
	t      *testing.T
	router routers.Router
	mu     sync.Mutex
	seen   map[string]bool // "METHOD /path status" checked
}

func newSpecChecker(t *testing.T) *specChecker {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(specPath)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(loader.Context))
	doc.Servers = nil // match any host: the test server's
	router, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)
	return &specChecker{t: t, router: router, seen: map[string]bool{}}
}

func (c *specChecker) RoundTrip(req *http.Request) (*http.Response, error) {
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		c.t.Errorf("%s %s: not in the spec: %v", req.Method, req.URL.Path, err)
		return http.DefaultTransport.RoundTrip(req)
	}
	// The request is checked on a copy: the validator reads its body.
	var body []byte
	if req.Body != nil {
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	checked := req.Clone(req.Context())
	checked.Body = io.NopCloser(bytes.NewReader(body))
	in := &openapi3filter.RequestValidationInput{Request: checked, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	if err := openapi3filter.ValidateRequest(req.Context(), in); err != nil {
		c.t.Errorf("%s %s: the request breaks the spec: %v", req.Method, req.URL.Path, err)
	}
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err = io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return nil, err
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: res.StatusCode, Header: res.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true}}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(req.Context(), out); err != nil {
		c.t.Errorf("%s %s answered %d, which breaks the spec: %v\n%s", req.Method, req.URL.Path, res.StatusCode, err, body)
	}
	c.mu.Lock()
	c.seen[req.Method+" "+route.Path+" "+http.StatusText(res.StatusCode)] = true
	c.mu.Unlock()
	return res, nil
}

// A short sale driven through the real gateway (real Redis, real MariaDB,
// a real worker) by the client generated from the spec, every request and
// answer checked against the spec: create a voucher, claim, read, pay,
// list, cancel, resell; the admin list, the voucher, pause and resume, a
// top-up, the report and the console's history; and errors.
func TestASaleThroughTheGeneratedClient(t *testing.T) {
	env := testenv.New(t, 2)
	gw, err := gateway.New(gateway.Config{AdminToken: admin, JWTSecret: secret, BuyerPay: true}, env.RDB, env.DB, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(gw.Close)
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(srv.Close)
	checker := newSpecChecker(t)
	c, err := apiclient.NewClientWithResponses(srv.URL, apiclient.WithHTTPClient(&http.Client{Transport: checker}))
	require.NoError(t, err)
	ctx := context.Background()
	as := func(token string) apiclient.RequestEditorFn {
		return func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+token)
			return nil
		}
	}
	asAdmin := as(admin)
	user := func(name string) apiclient.RequestEditorFn {
		tok, err := gateway.SignUserToken(secret, name, time.Now().Add(time.Hour))
		require.NoError(t, err)
		return as(tok)
	}
	alice, bob, carol := user("alice"), user("bob"), user("carol")
	ptr := func(n int) *int { return &n }

	created, err := c.PostAdminV1VouchersWithResponse(ctx, nil, apiclient.PostAdminV1VouchersJSONRequestBody{
		Name: "generated", Stock: ptr(2), PerUserLimit: ptr(1), PaymentTimeoutSeconds: ptr(600)}, asAdmin)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, created.StatusCode(), "%s", created.Body)
	id := created.JSON201.Id

	claim := func(who apiclient.RequestEditorFn) *apiclient.PostV1VouchersIdOrdersResponse {
		res, err := c.PostV1VouchersIdOrdersWithResponse(ctx, id, &apiclient.PostV1VouchersIdOrdersParams{},
			apiclient.PostV1VouchersIdOrdersJSONRequestBody{Quantity: ptr(1)}, who)
		require.NoError(t, err)
		return res
	}
	first := claim(alice)
	require.Equal(t, http.StatusAccepted, first.StatusCode(), "%s", first.Body)
	require.NotNil(t, first.JSON202.OrderId)
	aliceOrder := *first.JSON202.OrderId
	limited := claim(alice)
	require.Equal(t, http.StatusConflict, limited.StatusCode())
	require.Equal(t, apiclient.ErrorCodeUserLimit, limited.JSONDefault.Error)
	second := claim(bob)
	require.Equal(t, http.StatusAccepted, second.StatusCode(), "%s", second.Body)
	bobOrder := *second.JSON202.OrderId
	soldOut := claim(carol)
	require.Equal(t, http.StatusConflict, soldOut.StatusCode())
	require.Equal(t, apiclient.ErrorCodeSoldOut, soldOut.JSONDefault.Error)

	pending, err := c.GetV1OrdersIdWithResponse(ctx, aliceOrder, alice)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, pending.StatusCode(), "%s", pending.Body)
	require.EqualValues(t, "pending", pending.JSON200.Status)

	persistAll(t, env)
	paid, err := c.PostV1OrdersIdPayWithResponse(ctx, aliceOrder, alice)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, paid.StatusCode(), "%s", paid.Body)
	require.EqualValues(t, "paid", paid.JSON200.Status)

	list, err := c.GetV1OrdersWithResponse(ctx, &apiclient.GetV1OrdersParams{VoucherId: id}, bob)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, list.StatusCode(), "%s", list.Body)
	require.Len(t, list.JSON200.Orders, 1)
	require.Equal(t, bobOrder, list.JSON200.Orders[0].OrderId)

	cancelled, err := c.PostV1OrdersIdCancelWithResponse(ctx, bobOrder, bob)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, cancelled.StatusCode(), "%s", cancelled.Body)
	require.EqualValues(t, "cancelled", cancelled.JSON200.Status)
	resold := claim(carol)
	require.Equal(t, http.StatusAccepted, resold.StatusCode(), "the cancelled unit is sold again: %s", resold.Body)
	persistAll(t, env)

	vouchers, err := c.GetAdminV1VouchersWithResponse(ctx, &apiclient.GetAdminV1VouchersParams{Limit: ptr(10)}, asAdmin)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, vouchers.StatusCode(), "%s", vouchers.Body)
	require.Len(t, vouchers.JSON200.Vouchers, 1)
	for _, call := range []func() (*http.Response, error){
		func() (*http.Response, error) {
			r, err := c.PostAdminV1VouchersIdPauseWithResponse(ctx, id, asAdmin)
			return r.HTTPResponse, err
		},
		func() (*http.Response, error) {
			r, err := c.PostAdminV1VouchersIdResumeWithResponse(ctx, id, asAdmin)
			return r.HTTPResponse, err
		},
		func() (*http.Response, error) {
			r, err := c.PatchAdminV1VouchersIdWithResponse(ctx, id, apiclient.PatchAdminV1VouchersIdJSONRequestBody{AddStock: ptr(3)}, asAdmin)
			return r.HTTPResponse, err
		},
	} {
		res, err := call()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode)
	}
	status, err := c.GetAdminV1VouchersIdWithResponse(ctx, id, asAdmin)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status.StatusCode(), "%s", status.Body)
	require.EqualValues(t, 5, status.JSON200.StockTotal)

	report, err := c.GetAdminV1VouchersIdReportWithResponse(ctx, id, asAdmin)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, report.StatusCode(), "%s", report.Body)
	require.Equal(t, 3, report.JSON200.AdmittedOrders)
	require.Equal(t, map[string]int{"sold_out": 1, "user_limit": 1}, report.JSON200.RefusedClaims.ByReason)
	history, err := c.GetAdminV1HistoryWithResponse(ctx, asAdmin)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, history.StatusCode(), "%s", history.Body)
	stats, err := c.GetAdminV1StatsWithResponse(ctx, asAdmin)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, stats.StatusCode(), "%s", stats.Body)

	// A draw: the entry, the draw's state and commitment, as the spec says.
	allocation := apiclient.PostAdminV1VouchersJSONBodyAllocationDraw
	ends := time.Now().Add(time.Hour)
	drawn, err := c.PostAdminV1VouchersWithResponse(ctx, nil, apiclient.PostAdminV1VouchersJSONRequestBody{
		Name: "draw", Stock: ptr(1), Allocation: &allocation, EndsAt: &ends}, asAdmin)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, drawn.StatusCode(), "%s", drawn.Body)
	require.NotNil(t, drawn.JSON201.SeedCommitment)
	entered, err := c.PostV1VouchersIdOrdersWithResponse(ctx, drawn.JSON201.Id, &apiclient.PostV1VouchersIdOrdersParams{}, apiclient.PostV1VouchersIdOrdersJSONRequestBody{}, carol)
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, entered.StatusCode(), "%s", entered.Body)
	require.NotNil(t, entered.JSON202.EntryId)
	again, err := c.PostV1VouchersIdOrdersWithResponse(ctx, drawn.JSON201.Id, &apiclient.PostV1VouchersIdOrdersParams{}, apiclient.PostV1VouchersIdOrdersJSONRequestBody{}, carol)
	require.NoError(t, err)
	require.Equal(t, apiclient.ErrorCodeAlreadyEntered, again.JSONDefault.Error)
	state, err := c.GetV1VouchersIdDrawWithResponse(ctx, drawn.JSON201.Id, carol)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, state.StatusCode(), "%s", state.Body)
	require.Equal(t, *drawn.JSON201.SeedCommitment, state.JSON200.SeedCommitment)

	// A waiting room: joined and polled as the spec says.
	roomed, err := c.PostAdminV1VouchersWithResponse(ctx, nil, apiclient.PostAdminV1VouchersJSONRequestBody{
		Name: "room", Stock: ptr(2), WaitingRoom: &apiclient.WaitingRoom{AdmitPerSecond: 10}}, asAdmin)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, roomed.StatusCode(), "%s", roomed.Body)
	require.Equal(t, 120, *roomed.JSON201.WaitingRoom.PassSeconds)
	joined, err := c.PostV1VouchersIdQueueWithResponse(ctx, roomed.JSON201.Id, &apiclient.PostV1VouchersIdQueueParams{}, carol)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, joined.StatusCode(), "%s", joined.Body)
	require.NotEmpty(t, joined.JSON200.QueueToken)
	polled, err := c.GetV1VouchersIdQueueWithResponse(ctx, roomed.JSON201.Id,
		&apiclient.GetV1VouchersIdQueueParams{XFlashsaleQueue: &joined.JSON200.QueueToken}, carol)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, polled.StatusCode(), "%s", polled.Body)
	noPass, err := c.PostV1VouchersIdOrdersWithResponse(ctx, roomed.JSON201.Id, &apiclient.PostV1VouchersIdOrdersParams{}, apiclient.PostV1VouchersIdOrdersJSONRequestBody{}, alice)
	require.NoError(t, err)
	require.Equal(t, apiclient.ErrorCodeNotAdmitted, noPass.JSONDefault.Error)

	// A proof-of-work challenge, as the spec says.
	challenge, err := c.GetV1ChallengeWithResponse(ctx, &apiclient.GetV1ChallengeParams{VoucherId: roomed.JSON201.Id}, carol)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, challenge.StatusCode(), "%s", challenge.Body)
	require.Equal(t, gateway.PowMaxNumberDefault, challenge.JSON200.MaxNumber)

	// Errors are described too.
	missing, err := c.GetAdminV1VouchersIdWithResponse(ctx, "999999", asAdmin)
	require.NoError(t, err)
	require.Equal(t, apiclient.ErrorCodeVoucherNotFound, missing.JSONDefault.Error)
	anon, err := c.GetV1OrdersIdWithResponse(ctx, aliceOrder)
	require.NoError(t, err)
	require.Equal(t, apiclient.ErrorCodeUnauthorized, anon.JSONDefault.Error)
	require.GreaterOrEqual(t, len(checker.seen), 15, "%v", checker.seen)
}

// persistAll persists what every partition holds.
func persistAll(t *testing.T, env *testenv.Env) {
	t.Helper()
	w := persist.NewOrders(persist.Config{Consumer: "w"}, env.RDB, env.DB, zaptest.NewLogger(t), nil, nil)
	ctx := context.Background()
	for p := range env.RDB.Partitions() {
		entries, err := env.RDB.ReadGroup(ctx, p, "w", ">", 100, 10*time.Millisecond)
		require.NoError(t, err)
		require.NoError(t, w.Handle(ctx, entries))
	}
}
