package gateway_test

// Attacks on the gateway's surfaces, each reproduced as an attacker did it
// and held to what the gateway answers now.

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/proof"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/room"
)

// A body sent with both Content-Length and Transfer-Encoding: chunked was
// answered and its connection kept, so the bytes after the chunked body
// were served as a second request, one a proxy framing by Content-Length
// never saw. Every chunked body is now refused 411 and its connection
// closed: nothing after it is read.
func TestAChunkedBodyIsRefusedAndItsConnectionClosed(t *testing.T) {
	f := newFixture(t)
	for name, framing := range map[string]string{
		"CL and TE": "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
		"TE alone":  "Transfer-Encoding: chunked\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			smuggled := "GET /v1/orders/1 HTTP/1.1\r\nHost: x\r\n\r\n"
			requireLengthRequiredAndClosed(t, f.srv.Listener.Addr().String(), "POST /v1/vouchers/1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
				"Authorization: Bearer "+f.token("eve")+"\r\n"+framing+"\r\n0\r\n\r\n"+smuggled)
		})
	}
}

// Go's server drops an HTTP/1.0 request's Transfer-Encoding before a
// handler sees it, and reads its body by Content-Length (or not at all):
// such a claim was admitted and its connection kept, the chunks then
// served as the next request. Now a Transfer-Encoding refuses any request
// and closes its connection, HTTP/1.0 included, and an HTTP/1.0 request
// is its connection's last (or, after an HTTP/1.1 one, refused).
func TestAnHTTP10ChunkedBodyIsRefusedAndItsConnectionClosed(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"x","stock":10,"per_user_limit":10}`)
	addr := serveGateway(t, f, nil)
	claim := "POST /v1/vouchers/" + id + "/orders HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nAuthorization: Bearer " + f.token("eve") + "\r\n"
	smuggled := "GET /v1/orders/1 HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n"
	send := func(t *testing.T, raw string) (*http.Response, string, string) {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
		head := strings.Index(raw, "\r\n\r\n") + 4
		for i := 0; i < len(raw); i += 7 { // in pieces: a header split across reads is still read
			_, err = io.WriteString(c, raw[i:min(i+7, len(raw))])
			if i < head { // after the head the gateway may have answered and closed
				require.NoError(t, err)
			}
		}
		rd := bufio.NewReader(c)
		res, err := http.ReadResponse(rd, nil)
		require.NoError(t, err)
		body, _ := io.ReadAll(res.Body)
		rest, _ := io.ReadAll(rd) // until the gateway closes, or the deadline
		return res, string(body), string(rest)
	}
	for name, framing := range map[string]string{
		"TE alone":  "Transfer-Encoding: chunked\r\n",
		"CL and TE": "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
		"odd case":  "tRaNsFeR-eNcOdInG: chunked\r\n",
		"identity":  "Transfer-Encoding: identity\r\nContent-Length: 0\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			res, body, rest := send(t, claim+framing+"\r\n0\r\n\r\n"+smuggled)
			require.Equal(t, http.StatusLengthRequired, res.StatusCode, body)
			require.Contains(t, body, `"error":"length_required"`)
			require.True(t, res.Close, "the connection is closed after the answer")
			require.Empty(t, rest, "no answer to the bytes after the body")
		})
	}
	require.EqualValues(t, 10, f.do("GET", "/admin/v1/vouchers/"+id, admin, "").Body["stock"], "nothing refused was admitted")

	t.Run("HTTP/1.0 with a length is served, once a connection", func(t *testing.T) {
		res, body, rest := send(t, claim+"Content-Length: 0\r\n\r\n"+smuggled)
		require.Equal(t, http.StatusAccepted, res.StatusCode, body)
		require.True(t, res.Close, "an HTTP/1.0 request is its connection's last")
		require.Empty(t, rest)
	})
	t.Run("HTTP/1.0 after HTTP/1.1 on one connection", func(t *testing.T) {
		first := "GET /v1/vouchers/" + id + "/queue HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + f.token("eve") + "\r\n\r\n"
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
		_, err = io.WriteString(c, first)
		require.NoError(t, err)
		rd := bufio.NewReader(c)
		res, err := http.ReadResponse(rd, nil)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		require.Equal(t, http.StatusNotFound, res.StatusCode, "no room: the first request is served")
		_, err = io.WriteString(c, claim+"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"+smuggled)
		require.NoError(t, err)
		res, err = http.ReadResponse(rd, nil)
		require.NoError(t, err)
		body, _ := io.ReadAll(res.Body)
		require.Equal(t, http.StatusHTTPVersionNotSupported, res.StatusCode, string(body))
		require.Contains(t, string(body), `"error":"http_version"`)
		rest, _ := io.ReadAll(rd)
		require.Empty(t, string(rest))
	})
}

// requireLengthRequiredAndClosed sends raw on a connection of its own to
// addr and requires the answer 411 length_required, the connection
// closed after it, and nothing answered to the bytes after the body.
func requireLengthRequiredAndClosed(t *testing.T, addr, raw string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = io.WriteString(c, raw)
	require.NoError(t, err)
	rd := bufio.NewReader(c)
	res, err := http.ReadResponse(rd, nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	require.Equal(t, http.StatusLengthRequired, res.StatusCode, string(body))
	require.Contains(t, string(body), `"error":"length_required"`)
	require.True(t, res.Close, "the connection is closed after the answer")
	rest, _ := io.ReadAll(rd) // until the gateway closes, or the deadline
	require.Empty(t, string(rest), "no answer to the bytes after the body")
}

// Go's server answered "OPTIONS *" itself, before the gateway's checks,
// and kept an HTTP/1.0 connection open for it: its Transfer-Encoding was
// never refused, so a chunked body carried a whole second request, a
// claim on the public listener (answered 202) and an admin call on the
// admin one, that a proxy framing by chunks never saw. Now "OPTIONS *"
// meets the same checks as any request, on every listener: refused 411,
// the connection closed, nothing after it served.
func TestAnOptionsStarRequestCarriesNothingPastTheGuard(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"x","stock":10,"per_user_limit":10}`)
	gw, err := gateway.New(gateway.Config{AdminToken: admin, JWTSecret: secret, ClaimTimeout: 500 * time.Millisecond, UserRate: -1,
		SoldOutRefresh: -1, ShutdownTimeout: time.Second, AdminAddr: "127.0.0.1:0"}, f.env.RDB, f.env.DB, zaptest.NewLogger(t), gateway.WithClock(f.clock.Now))
	require.NoError(t, err)
	pub, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	adm, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.ServeWithAdmin(ctx, pub, adm) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

	hidden := map[string]string{
		"public": "POST /v1/vouchers/" + id + "/orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + f.token("eve") + "\r\nContent-Length: 0\r\n\r\n",
		"admin":  "POST /admin/v1/vouchers/" + id + "/pause HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + admin + "\r\nContent-Length: 0\r\n\r\n",
	}
	for name, addr := range map[string]string{"public": pub.Addr().String(), "admin": adm.Addr().String()} {
		for _, version := range []string{"HTTP/1.0", "HTTP/1.1"} {
			t.Run(name+" "+version, func(t *testing.T) {
				inner := hidden[name]
				requireLengthRequiredAndClosed(t, addr, "OPTIONS * "+version+"\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n"+
					strconv.FormatInt(int64(len(inner)), 16)+"\r\n"+inner+"\r\n0\r\n\r\n")
			})
		}
	}
	v := f.do("GET", "/admin/v1/vouchers/"+id, admin, "").Body
	require.EqualValues(t, 10, v["stock"], "no hidden claim was admitted")
	require.NotEqual(t, true, v["paused"], "no hidden admin call was served")
}

// serveGateway serves a second gateway over f's stores as the binary
// does (Gateway.Serve, its listener's connections read for their
// framing), and returns its address; log is its logger (nil: the test's).
func serveGateway(t *testing.T, f *fixture, log *zap.Logger, opts ...gateway.Option) string {
	t.Helper()
	if log == nil {
		log = zaptest.NewLogger(t)
	}
	gw, err := gateway.New(gateway.Config{AdminToken: admin, JWTSecret: secret, ClaimTimeout: 500 * time.Millisecond, UserRate: -1,
		SoldOutRefresh: -1, ShutdownTimeout: time.Second}, f.env.RDB, f.env.DB, log, append([]gateway.Option{gateway.WithClock(f.clock.Now)}, opts...)...)
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ctx, l) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	return l.Addr().String()
}

// Names are shown in the console, reports and terminals: control and
// bidirectional characters are refused, on creation, and the name stored
// is the one sent.
func TestVoucherNamesArePrintable(t *testing.T) {
	f := newFixture(t)
	for name, bad := range map[string]string{
		"NUL": `a\u0000b`, "ESC": `\u001b[31mred`, "newline": `a\nb`, "right-to-left override": `evil\u202Egnp.exe`,
		"isolate": `a\u2066b`, "DEL": `a\u007fb`,
	} {
		res := f.do("POST", "/admin/v1/vouchers", admin, `{"name":"`+bad+`","stock":1}`)
		requireError(t, res, http.StatusBadRequest, "invalid_field")
		require.Contains(t, res.Body["message"], "printable", name)
	}
	good := f.createVoucher(`{"name":"Ünïcode 限量 🎉 sale","stock":1}`)
	require.Equal(t, "Ünïcode 限量 🎉 sale", f.do("GET", "/admin/v1/vouchers/"+good, admin, "").Body["name"])
	require.Zero(t, f.env.Count(t, "SELECT COUNT(*) FROM vouchers WHERE name <> ?", "Ünïcode 限量 🎉 sale"), "nothing refused was written")
}

// JSON is read as encoding/json/v2 reads it: a member name matches only
// as the API spells it, and appears once. ("Stock":7 was taken for
// stock, and of two "stock" members the last won.)
func TestRequestJSONIsReadExactly(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct{ body, code, says string }{
		{`{"name":"a","Stock":7}`, "unknown_field", `"Stock"`},
		{`{"NAME":"a","stock":7}`, "unknown_field", `"NAME"`},
		{`{"name":"a","stock":1,"stock":1000}`, "malformed_json", `"stock" appears twice`},
		{`{"name":"a","stock":1,"waiting_room":{"admit_per_second":1,"admit_per_second":9}}`, "malformed_json", "appears twice"},
	} {
		res := f.do("POST", "/admin/v1/vouchers", admin, tc.body)
		requireError(t, res, http.StatusBadRequest, tc.code)
		require.Contains(t, res.Body["message"], tc.says, tc.body)
	}
	require.Zero(t, f.env.Count(t, "SELECT COUNT(*) FROM vouchers"), "nothing refused was written")
	id := f.createVoucher(`{"name":"a","stock":5,"per_user_limit":3}`)
	requireError(t, f.do("PATCH", "/admin/v1/vouchers/"+id, admin, `{"Add_Stock":9}`), http.StatusBadRequest, "unknown_field")
	requireError(t, f.do("PATCH", "/admin/v1/vouchers/"+id, admin, `{"add_stock":9,"add_stock":1}`), http.StatusBadRequest, "malformed_json")
	requireError(t, f.do("PATCH", "/admin/v1/vouchers/"+id, admin, `{"proof_of_work":{"max_number":5,"max_number":9}}`), http.StatusBadRequest, "malformed_json")
	require.EqualValues(t, 5, f.do("GET", "/admin/v1/vouchers/"+id, admin, "").Body["stock_total"], "nothing refused was changed")
	claim := "/v1/vouchers/" + id + "/orders"
	requireError(t, f.do("POST", claim, f.token("u"), `{"Quantity":2}`, "Content-Type", "application/json"), http.StatusBadRequest, "unknown_field")
	requireError(t, f.do("POST", claim, f.token("u"), `{"quantity":1,"quantity":3}`, "Content-Type", "application/json"), http.StatusBadRequest, "malformed_json")
	ok := f.do("POST", claim, f.token("u"), `{"quantity":2}`, "Content-Type", "application/json")
	require.Equal(t, http.StatusAccepted, ok.Status, ok.Raw)
}

// scriptCalls counts the scripts Redis ran (EVALSHA and EVAL) on env's own
// redis-server.
func scriptCalls(t *testing.T, env *testenv.Env) int64 {
	return testrdb.Calls(t, env.RDB.Client(), "eval", "evalsha")
}

// After an operator took a room away, every poll carrying a queue token
// ran room.lua (3,600 script calls for 3,600 polls). "No room" is now
// remembered like the room's state: the polls cost Redis only the
// gateway's own ticks.
func TestARemovedRoomsPollsCostRedisNothing(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"room","stock":5,"waiting_room":{"admit_per_second":10}}`)
	queue := "/v1/vouchers/" + id + "/queue"
	joined := f.do("POST", queue, f.token("ann"), "")
	require.Equal(t, http.StatusOK, joined.Status, joined.Raw)
	tok := joined.Body["queue_token"].(string)
	require.Equal(t, http.StatusOK, f.do("PATCH", "/admin/v1/vouchers/"+id, admin, `{"waiting_room":null}`).Status)
	testenv.Eventually(t, 10*time.Second, "polls told the room is gone", func() bool {
		return f.do("GET", queue, "", "", room.Header, tok).Body["error"] == "no_waiting_room"
	})

	const polls = 300
	before, t0 := scriptCalls(t, f.env), time.Now()
	for range polls {
		requireError(t, f.do("GET", queue, "", "", room.Header, tok), http.StatusNotFound, "no_waiting_room")
	}
	calls, took := scriptCalls(t, f.env)-before, time.Since(t0)
	// The gateway ticks the room every 100 ms while polls ask about it.
	ticks := int64(took/(100*time.Millisecond)) + 2
	t.Logf("%d polls in %s: %d script calls (ticks allow %d)", polls, took, calls, ticks)
	require.LessOrEqual(t, calls, ticks, "only the gateway's ticks ran scripts, not the polls")
}

// An admitted user's pass was answered 403 not_admitted by a gateway that
// did not know the room: one restarted, or one nobody had asked about the
// room for 30 s. A room a gateway does not know means "ask Redis".
func TestAPassHoldsOnAGatewayThatDidNotKnowTheRoom(t *testing.T) {
	env := testenv.New(t, 4)
	a := newFixtureOn(t, env, gateway.Config{})
	id := a.createVoucher(`{"name":"room","stock":5,"waiting_room":{"admit_per_second":100}}`)
	queue := "/v1/vouchers/" + id + "/queue"
	toks := map[string]string{}
	for _, u := range []string{"ann", "ben"} {
		res := a.do("POST", queue, a.token(u), "")
		require.Equal(t, http.StatusOK, res.Status, res.Raw)
		toks[u] = res.Body["queue_token"].(string)
	}
	a.clock.Add(time.Second)
	testenv.Eventually(t, 10*time.Second, "both admitted", func() bool {
		return a.do("GET", queue, "", "", room.Header, toks["ann"]).Body["state"] == "admitted" &&
			a.do("GET", queue, "", "", room.Header, toks["ben"]).Body["state"] == "admitted"
	})

	// A second gateway, as one just restarted: it has never heard of the
	// room. The claim's queue token says there is one: it reads the room
	// and runs the admission script once.
	reg := prometheus.NewRegistry()
	b := newFixtureOn(t, env, gateway.Config{}, gateway.WithRegistry(reg))
	b.clock.Set(a.clock.Now())
	got := b.do("POST", "/v1/vouchers/"+id+"/orders", b.token("ann"), "", room.Header, toks["ann"])
	require.Equal(t, http.StatusAccepted, got.Status, got.Raw)
	require.EqualValues(t, 1, testenv.Metric(t, reg, "flashsale_redis_script_duration_seconds"), "one admission script run")
	c := newFixtureOn(t, env, gateway.Config{})
	c.clock.Set(a.clock.Now())
	// Without its token, a pass is not looked up: the script refuses it
	// (the gateway learns the room), then the gateway does.
	requireError(t, c.do("POST", "/v1/vouchers/"+id+"/orders", c.token("ben"), ""), http.StatusForbidden, "not_admitted")
	requireError(t, c.do("POST", "/v1/vouchers/"+id+"/orders", c.token("ben"), ""), http.StatusForbidden, "not_admitted")
	got = c.do("POST", "/v1/vouchers/"+id+"/orders", c.token("ben"), "", room.Header, toks["ben"])
	require.Equal(t, http.StatusAccepted, got.Status, got.Raw)
}

// A claim retried with its Idempotency-Key gets its first admission,
// whatever lapsed since: the room's pass, the proof's challenge. (It was
// answered 403 not_admitted or 403 proof_invalid by the gateway's checks
// before the script could replay it.)
func TestAKeyedRetryIsAnsweredFromItsFirstAdmission(t *testing.T) {
	f := newFixture(t)
	roomID := f.createVoucher(`{"name":"room","stock":5,"waiting_room":{"admit_per_second":100,"pass_seconds":5}}`)
	queue := "/v1/vouchers/" + roomID + "/queue"
	joined := f.do("POST", queue, f.token("ann"), "")
	tok := joined.Body["queue_token"].(string)
	f.clock.Add(time.Second)
	testenv.Eventually(t, 10*time.Second, "ann admitted", func() bool {
		return f.do("GET", queue, "", "", room.Header, tok).Body["state"] == "admitted"
	})
	claim := "/v1/vouchers/" + roomID + "/orders"
	first := f.do("POST", claim, f.token("ann"), "", room.Header, tok, "Idempotency-Key", "k1")
	require.Equal(t, http.StatusAccepted, first.Status, first.Raw)
	f.clock.Add(time.Minute) // the pass lapsed
	again := f.do("POST", claim, f.token("ann"), "", room.Header, tok, "Idempotency-Key", "k1")
	require.Equal(t, http.StatusAccepted, again.Status, again.Raw)
	require.Equal(t, first.Body["order_id"], again.Body["order_id"])
	requireError(t, f.do("POST", claim, f.token("ann"), "", room.Header, tok, "Idempotency-Key", "k2"), http.StatusForbidden, "not_admitted")

	gated := f.createVoucher(`{"name":"gated","stock":5,"per_user_limit":2,"proof_of_work":{"max_number":300}}`)
	sol, _ := f.solve("ben", gated)
	claim = "/v1/vouchers/" + gated + "/orders"
	first = f.do("POST", claim, f.token("ben"), "", proof.Header, sol, "Idempotency-Key", "k1")
	require.Equal(t, http.StatusAccepted, first.Status, first.Raw)
	f.clock.Add(3 * time.Minute) // the challenge expired
	again = f.do("POST", claim, f.token("ben"), "", proof.Header, sol, "Idempotency-Key", "k1")
	require.Equal(t, http.StatusAccepted, again.Status, again.Raw)
	require.Equal(t, first.Body["order_id"], again.Body["order_id"])
	requireError(t, f.do("POST", claim, f.token("ben"), "", proof.Header, sol, "Idempotency-Key", "k2"), http.StatusForbidden, "proof_invalid")

	// A draw's entry is answered as an entry again.
	ends := f.clock.Now().Add(time.Hour).Format(time.RFC3339)
	drawID := f.createVoucher(`{"name":"draw","stock":5,"allocation":"draw","ends_at":"` + ends + `","proof_of_work":{"max_number":300}}`)
	sol, _ = f.solve("cat", drawID)
	claim = "/v1/vouchers/" + drawID + "/orders"
	first = f.do("POST", claim, f.token("cat"), "", proof.Header, sol, "Idempotency-Key", "k1")
	require.Equal(t, http.StatusAccepted, first.Status, first.Raw)
	require.NotEmpty(t, first.Body["entry_id"], first.Raw)
	f.clock.Add(3 * time.Minute) // the challenge expired
	again = f.do("POST", claim, f.token("cat"), "", proof.Header, sol, "Idempotency-Key", "k1")
	require.Equal(t, http.StatusAccepted, again.Status, again.Raw)
	require.Equal(t, first.Body["entry_id"], again.Body["entry_id"], again.Raw)
	require.Equal(t, "entered", again.Body["status"])
}

// A room gives at most FLASHSALE_ROOM_MAX_WAITERS places (51,936 joins in
// 15 s took 2.9 MB, unbounded); its keys expire with the voucher, or a
// week after their last change for a voucher without ends_at.
func TestARoomIsBoundedInPlacesAndTime(t *testing.T) {
	f := newFixtureOn(t, testenv.New(t, 4), gateway.Config{RoomMaxWaiters: 3})
	id := f.createVoucher(`{"name":"room","stock":5,"waiting_room":{"admit_per_second":1}}`)
	queue := "/v1/vouchers/" + id + "/queue"
	for i := range 3 {
		res := f.do("POST", queue, f.token("u"+strconv.Itoa(i)), "")
		require.Equal(t, http.StatusOK, res.Status, res.Raw)
	}
	requireError(t, f.do("POST", queue, f.token("late"), ""), http.StatusConflict, "queue_full")
	require.Equal(t, http.StatusOK, f.do("POST", queue, f.token("u1"), "").Status, "a waiter joining again keeps the place")

	rs := room.NewStore(f.env.RDB, 0)
	state, waiters := rs.Keys(parseID(t, id))
	ctx := context.Background()
	for _, k := range []string{state, waiters} {
		ttl, err := f.env.RDB.Client().TTL(ctx, k).Result()
		require.NoError(t, err)
		require.Greater(t, ttl, room.IdleTTL-time.Minute, k)
		require.LessOrEqual(t, ttl, room.IdleTTL, k)
	}
	// Past the bound, joins add nothing to Redis.
	n, _, err := rs.Waiters(ctx, parseID(t, id))
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
}

// Every voucher id is a valid question: asking about ids without a room
// (here, without a voucher) made each gateway tick every one of them
// every 100 ms for 30 s after the last ask, one after another, so a real
// room's refresh (its pause, its admissions) waited behind hundreds of
// script calls. An id without a room now costs Redis one read, shared by
// its askers, and no tick: a real room's pause reaches its waiters within
// a few of its own ticks while the asking goes on, and once it stops the
// gateway runs only the real room's ticks.
func TestUnknownVoucherIDsCostTheRoomsNothing(t *testing.T) {
	f := newFixture(t)
	start := f.clock.Now().Add(time.Minute).UTC()
	id := f.createVoucher(`{"name":"room","stock":100,"starts_at":"` + start.Format(time.RFC3339Nano) +
		`","waiting_room":{"admit_per_second":1,"prequeue_seconds":120}}`)
	queue := "/v1/vouchers/" + id + "/queue"
	joined := f.do("POST", queue, f.token("waiter"), "")
	require.Equal(t, http.StatusOK, joined.Status, joined.Raw)
	tok := joined.Body["queue_token"].(string)
	f.clock.Set(start)
	state := func() string { return f.do("GET", queue, "", "", room.Header, tok).Body["state"].(string) }
	testenv.Eventually(t, 10*time.Second, "the room open", func() bool { return state() != "" })
	calls := func() int64 { return scriptCalls(t, f.env) }

	// 20 users ask about 10 ids each, then each asks again about all 200.
	const users, each = 20, 10
	ask := func(user, i int) {
		res := f.do("GET", "/v1/vouchers/"+strconv.Itoa(1_000_000+i)+"/queue", f.token("asker"+strconv.Itoa(user)), "")
		requireError(t, res, http.StatusNotFound, "voucher_not_found")
	}
	before := calls()
	t0 := time.Now()
	for u := range users {
		for k := range each {
			ask(u, u*each+k)
		}
	}
	for u := range users {
		for i := range users * each {
			ask(u, i)
		}
	}
	ticks := int64(time.Since(t0)/(100*time.Millisecond)) + 2
	require.LessOrEqual(t, calls()-before, int64(users*each)+ticks,
		"one read an unknown id, whoever asks, and the real room's ticks")

	// While the asking goes on, the room is paused: its waiter hears it
	// within a few of the room's own ticks (before, a tick pass ran a
	// script for each of the 200 ids first).
	stop := make(chan struct{})
	asking := make(chan struct{})
	go func() {
		defer close(asking)
		client := &http.Client{}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			req, _ := http.NewRequest("GET", f.srv.URL+"/v1/vouchers/"+strconv.Itoa(1_000_000+i%(users*each))+"/queue", nil)
			req.Header.Set("Authorization", "Bearer "+f.token("asker0"))
			if res, err := client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}
	}()
	before = calls()
	require.Equal(t, http.StatusOK, f.do("POST", "/admin/v1/vouchers/"+id+"/pause", admin, "").Status)
	testenv.Eventually(t, 10*time.Second, "the pause heard", func() bool { return state() == room.Paused })
	require.LessOrEqual(t, calls()-before, int64(20), "the room's pause reached its waiter within a few script calls")
	close(stop)
	<-asking

	// Once the asking stops, only the real room is ticked: its next 8
	// script calls take at least the 6 tick intervals between them (a
	// tick pass for each of the 200 ids made them in milliseconds).
	before, t0 = calls(), time.Now()
	testenv.Eventually(t, time.Minute, "8 more script calls", func() bool { return calls()-before >= 8 })
	ticks = int64(time.Since(t0)/(100*time.Millisecond)) + 2
	require.LessOrEqual(t, calls()-before, ticks, "only the real room's ticks after the asking stopped")
}

// Every voucher id is a valid question, and a poll of one no voucher has
// ran a script (600 accounts asking 20 new ids each: 12,000 polls, 12,000
// script calls). The gateway now answers an id the rooms' index does not
// name from memory, below or above the highest id it names: 12,000 polls
// cost Redis at most 5 % of that in commands (the gateway's own reads of
// the index's versions), and the real room still answers.
func TestPollsOfUnknownIDsCostRedisNothingPerID(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"room","stock":5,"waiting_room":{"admit_per_second":10}}`)
	ctx := context.Background()
	// A voucher written long ago with a high id, without a room: the
	// ids below it that no voucher has are known not to be vouchers.
	const high, partitions = 50_000_000, 4
	require.NoError(t, f.env.RDB.Client().HSet(ctx, rdb.RoomsKey(high%partitions), strconv.Itoa(high), 0).Err())
	require.NoError(t, f.env.RDB.Client().HIncrBy(ctx, rdb.RoomsKey(high%partitions), rdb.RoomsVersion, 1).Err())
	testenv.Eventually(t, 10*time.Second, "the gateway read the index's change", func() bool {
		return f.do("GET", "/v1/vouchers/"+strconv.Itoa(high-1)+"/queue", f.token("x"), "").Body["error"] == "voucher_not_found"
	})
	commands := func() int64 {
		info, err := f.env.RDB.Client().Info(ctx, "stats").Result()
		require.NoError(t, err)
		m := regexp.MustCompile(`total_commands_processed:(\d+)`).FindStringSubmatch(info)
		require.NotNil(t, m)
		n, _ := strconv.ParseInt(m[1], 10, 64)
		return n
	}
	const users, each = 600, 20
	tokens := make([]string, users)
	for u := range tokens {
		tokens[u] = f.token("asker" + strconv.Itoa(u))
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	run := func(base int) (calls int64, wrong int64) {
		var bad atomic.Int64
		before := commands()
		var wg sync.WaitGroup
		for k := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for u := k; u < users; u += 8 {
					for i := range each {
						req, _ := http.NewRequest("GET", f.srv.URL+"/v1/vouchers/"+strconv.Itoa(base+u*each+i)+"/queue", nil)
						req.Header.Set("Authorization", "Bearer "+tokens[u])
						res, err := client.Do(req)
						if err != nil {
							bad.Add(1)
							continue
						}
						body, _ := io.ReadAll(res.Body)
						res.Body.Close()
						if res.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `"voucher_not_found"`) {
							bad.Add(1)
						}
					}
				}
			}()
		}
		wg.Wait()
		return commands() - before - 1, bad.Load() // the INFO itself is one
	}
	below, wrong := run(1_000_000)
	require.Zero(t, wrong, "every poll answered 404 voucher_not_found")
	above, wrong := run(60_000_000)
	require.Zero(t, wrong, "every poll answered 404 voucher_not_found")
	t.Logf("12,000 polls of new unknown ids: %d commands below the highest id indexed, %d above it", below, above)
	require.LessOrEqual(t, below, int64(users*each/20), "at most 5 % of the polls in commands")
	require.LessOrEqual(t, above, int64(users*each/20), "at most 5 % of the polls in commands")

	res := f.do("GET", "/v1/vouchers/"+id+"/queue", f.token("asker0"), "")
	requireError(t, res, http.StatusNotFound, "not_in_queue")
}

// Waiters whose place the room cannot have admitted cost Redis a writing
// script a claim: a claim within a second's credit of the front read the
// room with room.lua's tick (marking its rate clock, HSET and EXPIREs),
// even while the front stood still, its passes at their cap or the room
// paused; and a claim without a queue token looked its place up in Redis
// each time. Now a stalled room's claims are refused from the gateway's
// state, a claim's read of a room (a peek) writes nothing, and a claim
// without a token on a room the gateway knows is refused from memory:
// INFO commandstats counts no script for them.
func TestClaimsARoomCannotHaveAdmittedCostRedisNothing(t *testing.T) {
	f := newFixtureOn(t, testenv.New(t, 4), gateway.Config{}, gateway.WithRoomTick(time.Hour))
	ctx := context.Background()
	rs := room.NewStore(f.env.RDB, 0)
	for _, c := range []struct{ name, body, stall string }{
		{"capped", `{"name":"capped","stock":2,"waiting_room":{"admit_per_second":1000,"pass_seconds":60}}`, ""},
		{"paused", `{"name":"paused","stock":100,"waiting_room":{"admit_per_second":1000,"pass_seconds":60}}`, "pause"},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := f.createVoucher(c.body)
			vid, _ := strconv.ParseInt(id, 10, 64)
			queue, orders := "/v1/vouchers/"+id+"/queue", "/v1/vouchers/"+id+"/orders"
			const n = 12
			toks := f.join(queue, "w", n)
			if c.stall == "pause" {
				require.Equal(t, http.StatusOK, f.do("POST", "/admin/v1/vouchers/"+id+"/pause", admin, "").Status)
			}
			// The room's ticks (another gateway's, say): two at the same
			// instant, the second finding the room stalled.
			f.clock.Add(time.Second)
			_, err := rs.Tick(ctx, vid, f.clock.Now())
			require.NoError(t, err)
			snap, err := rs.Tick(ctx, vid, f.clock.Now())
			require.NoError(t, err)
			require.False(t, snap.StalledAt.IsZero(), "stalled")
			front := snap.Front
			require.Less(t, front, int64(n))
			// The first claim with a token reads the room (one peek); the
			// gateway serves the rest from that state.
			requireError(t, f.do("POST", orders, f.token("w"+strconv.Itoa(n-1)), "", room.Header, toks[n-1]), http.StatusForbidden, "not_admitted")

			before := scriptCalls(t, f.env)
			claims := 0
			for range 10 {
				for i := int(front); i < n; i++ { // waiters within a second's credit of the front
					requireError(t, f.do("POST", orders, f.token("w"+strconv.Itoa(i)), "", room.Header, toks[i]), http.StatusForbidden, "not_admitted")
					claims++
				}
				for i := range n { // without a queue token: admitted or not
					requireError(t, f.do("POST", orders, f.token("w"+strconv.Itoa(i)), ""), http.StatusForbidden, "not_admitted")
					claims++
				}
			}
			calls := scriptCalls(t, f.env) - before
			t.Logf("%d claims of a %s room: %d script calls", claims, c.name, calls)
			require.Zero(t, calls, "refused from the gateway's state of the room")
		})
	}
}

// An anonymous page of an id above the highest the rooms' index names
// made the gateway read the whole index again (every 250 ms at most): one
// client at 6 pages a second kept Redis re-reading 50,000 fields a
// partition. Now no request reads the index: such an id is not found
// until the gateway's next read of what changed, once a second.
func TestPagesAboveTheIndexNeverReadIt(t *testing.T) {
	f := newFixture(t)
	f.createVoucher(`{"name":"room","stock":5,"waiting_room":{"admit_per_second":10}}`)
	hgetall := func() int64 { return testrdb.Calls(t, f.env.RDB.Client(), "hgetall") }
	before := hgetall()
	const pages = 40
	for i := range pages {
		f.clock.Add(300 * time.Millisecond) // past any "read again" interval of the gateway's clock
		res, err := http.Get(f.srv.URL + "/queue/" + strconv.Itoa(90_000_000+i))
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
	}
	n := hgetall() - before
	t.Logf("%d anonymous pages above the index: %d HGETALLs", pages, n)
	require.LessOrEqual(t, n, int64(4), "at most the once-a-second read of the partition the creation changed")
}
