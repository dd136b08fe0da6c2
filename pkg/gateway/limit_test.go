package gateway_test

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
)

// One user hammering the API is answered 429 with Retry-After, decided
// before the admission script runs, while another user's claims go
// through. The gateway's clock stands still here, so no token comes back
// during the test and the counts are exact.
func TestOneUserHammeringIsLimitedOthersAreNot(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newFixtureOn(t, testenv.New(t, 2), gateway.Config{UserRate: 5, UserBurst: 5}, gateway.WithRegistry(reg))
	id := f.createVoucher(`{"name":"hot","stock":100,"per_user_limit":1}`)
	bot, honest := f.token("bot"), f.token("honest")

	codes := map[int]int{}
	for i := range 40 {
		res := f.do("POST", "/v1/vouchers/"+id+"/orders", bot, "")
		codes[res.Status]++
		if res.Status == http.StatusTooManyRequests {
			require.Equal(t, "rate_limited", res.Body["error"])
			wait, err := strconv.Atoi(res.Header.Get("Retry-After"))
			require.NoError(t, err)
			require.GreaterOrEqual(t, wait, 1)
		}
		if i == 20 {
			res := f.do("POST", "/v1/vouchers/"+id+"/orders", honest, "")
			require.Equal(t, http.StatusAccepted, res.Status, "an honest user is not limited by the bot: %s", res.Raw)
		}
	}
	require.Equal(t, map[int]int{http.StatusAccepted: 1, http.StatusConflict: 4, http.StatusTooManyRequests: 35}, codes)
	// The script ran for the 5 the limit let through and the honest claim.
	require.EqualValues(t, 6, testenv.Metric(t, reg, "flashsale_redis_script_duration_seconds"))
	require.EqualValues(t, 35, testenv.Metric(t, reg, "flashsale_requests_shed_total", "reason", "user_rate"))
	// Orders and payments count against the same budget.
	requireError(t, f.do("GET", "/v1/orders/1", bot, ""), http.StatusTooManyRequests, "rate_limited")

	// Time passes: the bot gets a token back.
	f.clock.Add(time.Second)
	requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", bot, ""), http.StatusConflict, "user_limit")
}

// Per address, X-Forwarded-For counts only from a trusted proxy.
func TestAddressLimitBehindTrustedProxies(t *testing.T) {
	env := testenv.New(t, 2)
	f := newFixtureOn(t, env, gateway.Config{IPRate: 1, IPBurst: 2, TrustedProxies: []string{"127.0.0.1/32"}})
	get := func(xff string) int {
		return f.do("GET", "/v1/orders/1", "", "", "X-Forwarded-For", xff).Status
	}
	require.Equal(t, http.StatusUnauthorized, get("203.0.113.7"))
	require.Equal(t, http.StatusUnauthorized, get("203.0.113.7"))
	require.Equal(t, http.StatusTooManyRequests, get("203.0.113.7"))
	require.Equal(t, http.StatusUnauthorized, get("203.0.113.8"), "another client behind the proxy has its own budget")
	require.Equal(t, http.StatusTooManyRequests, get("198.51.100.1, 203.0.113.7"), "a forged left-most hop changes nothing")

	// Without trusted proxies the header is the client's word: ignored.
	g := newFixtureOn(t, env, gateway.Config{IPRate: 1, IPBurst: 2})
	codes := map[int]int{}
	for i := range 4 {
		codes[g.do("GET", "/v1/orders/1", "", "", "X-Forwarded-For", "203.0.113."+strconv.Itoa(i)).Status]++
	}
	require.Equal(t, map[int]int{http.StatusUnauthorized: 2, http.StatusTooManyRequests: 2}, codes)
}

// Behind a trusted proxy, IPv6 clients are counted by their /64 (one
// client holds a whole /64: by the full address, 40 addresses had 40
// budgets), and a hop that is no address is refused, not counted as the
// proxy (which put everyone behind it in one bucket).
func TestAddressLimitsCountIPv6ByPrefixAndRefuseUnreadableHops(t *testing.T) {
	env := testenv.New(t, 2)
	f := newFixtureOn(t, env, gateway.Config{IPRate: 1, IPBurst: 2, TrustedProxies: []string{"127.0.0.1/32"}})
	get := func(xff string) response {
		return f.do("GET", "/v1/orders/1", "", "", "X-Forwarded-For", xff)
	}
	codes := map[int]int{}
	for i := 1; i <= 40; i++ {
		codes[get("2001:db8::"+strconv.FormatInt(int64(i), 16)).Status]++
	}
	require.Equal(t, map[int]int{http.StatusUnauthorized: 2, http.StatusTooManyRequests: 38}, codes, "one /64, one budget")
	require.Equal(t, http.StatusUnauthorized, get("2001:db8:0:1::1").Status, "another /64 has its own")

	requireError(t, get("203.0.113.7, bogus"), http.StatusBadRequest, "invalid_forwarded_for")
	for range 30 { // never the proxy's bucket: a client behind it is not limited by them
		require.Equal(t, http.StatusBadRequest, get("bogus").Status)
	}
	require.Equal(t, http.StatusUnauthorized, get("203.0.113.9").Status)
}

// Past MaxInflight requests in flight, one more is answered 503 overloaded
// at once instead of queueing; the requests in flight finish normally.
func TestOverloadIsShedFast(t *testing.T) {
	env := testenv.New(t, 2)
	// The two claims must stay in flight until the test has seen the
	// shedding, however slow the machine: a gateway whose Redis calls wait
	// a minute, released by Resume (a 2 s timeout was a window a busy
	// machine could miss).
	c := env.Common
	c.RedisTimeout = time.Minute
	patient, err := c.Redis(context.Background(), 8)
	require.NoError(t, err)
	t.Cleanup(func() { patient.Client().Close() })
	slow := *env
	slow.RDB = patient
	f := newFixtureOn(t, &slow, gateway.Config{MaxInflight: 2, ClaimTimeout: time.Minute})
	id := f.createVoucher(`{"name":"slow","stock":10,"per_user_limit":1}`)
	require.NoError(t, env.Redis.Pause()) // claims now wait for their timeout
	t.Cleanup(func() { _ = env.Redis.Resume() })

	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("slow"+strconv.Itoa(i)), "")
		}()
	}
	// The probe is answered at once either way (404 when not shed), so it
	// never holds a slot itself.
	// 30 s: two claims in flight is a condition, not a duration; on a CI
	// machine running three copies of the suite it took over 10 s once.
	testenv.Eventually(t, 30*time.Second, "a request shed as overloaded", func() bool {
		res := f.do("GET", "/nope", "", "")
		return res.Status == http.StatusServiceUnavailable && res.Body["error"] == "overloaded" && res.Header.Get("Retry-After") == "1"
	})
	require.NoError(t, env.Redis.Resume())
	wg.Wait()
	res := f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("after"), "")
	require.Equal(t, http.StatusAccepted, res.Status, "served again once below the bound: %s", res.Raw)
}

// The operator is never shed by the buyers: with the buyers' MySQL slots
// all taken (reads saturating them), then their in-flight bound full
// (claims saturating it), a buyer is answered 503 at once while the
// operator creates, pauses, resumes, lists and reports a sale. (Both
// were one budget: voucher creations were answered 503 under a buyers'
// load.)
func TestTheOperatorIsNeverShedByTheBuyers(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"busy","stock":5}`)
	operate := func() {
		t.Helper()
		res := f.do("POST", "/admin/v1/vouchers", admin, `{"name":"made under load","stock":3}`, "Content-Type", "application/json")
		require.Equal(t, http.StatusCreated, res.Status, res.Raw)
		for _, p := range []string{"/pause", "/resume"} {
			res = f.do("POST", "/admin/v1/vouchers/"+id+p, admin, "")
			require.Equal(t, http.StatusOK, res.Status, res.Raw)
		}
		for _, path := range []string{"/admin/v1/vouchers", "/admin/v1/vouchers/" + id, "/admin/v1/vouchers/" + id + "/report", "/admin/v1/events"} {
			res = f.do("GET", path, admin, "")
			require.Equal(t, http.StatusOK, res.Status, "%s: %s", path, res.Raw)
		}
	}

	release := f.gw.HoldBuyersMySQL()
	requireError(t, f.do("GET", "/v1/orders?voucher_id="+id, f.token("reader"), ""), http.StatusServiceUnavailable, "unavailable")
	operate()
	release()

	release = f.gw.HoldBuyersInflight()
	requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("buyer"), ""), http.StatusServiceUnavailable, "overloaded")
	operate()
	release()
	require.Equal(t, http.StatusAccepted, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("buyer"), "").Status, "the buyers served again")

	// Every connection of the buyers' MySQL pool held (as reads slower
	// than their arrival hold them), buyers reading their orders and
	// claiming all the while: the operator's work waits on a pool of its
	// own. (The soak's creations answered 503 behind such a load.)
	sqlDB, err := f.env.DB.DB().DB()
	require.NoError(t, err)
	held := make([]*sql.Conn, sqlDB.Stats().MaxOpenConnections)
	for i := range held {
		held[i], err = sqlDB.Conn(t.Context())
		require.NoError(t, err)
	}
	stop := make(chan struct{})
	var buyers sync.WaitGroup
	var reads, claims atomic.Int64
	for b := range 16 {
		buyers.Go(func() {
			tok := f.token("load" + strconv.Itoa(b))
			for {
				select {
				case <-stop:
					return
				default:
				}
				method, path, n := "GET", "/v1/orders?voucher_id="+id, &reads
				if b%2 == 1 {
					method, path, n = "POST", "/v1/vouchers/"+id+"/orders", &claims
				}
				req, _ := http.NewRequest(method, f.srv.URL+path, nil)
				req.Header.Set("Authorization", "Bearer "+tok)
				if res, err := http.DefaultClient.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					n.Add(1)
				}
			}
		})
	}
	operate()
	close(stop)
	buyers.Wait()
	for _, c := range held {
		require.NoError(t, c.Close())
	}
	t.Logf("the operator's work done beside %d order reads and %d claims, every buyers' connection held", reads.Load(), claims.Load())
}
