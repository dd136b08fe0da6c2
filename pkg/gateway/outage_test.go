package gateway_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/reaper"
	"github.com/flashsale/flashsale/pkg/worker"
)

// With mariadbd frozen (SIGSTOP: connections open, nothing answers), a
// request that reads MySQL answers 503 unavailable with Retry-After at its
// deadline instead of hanging until the client gives up; beyond
// MySQLMaxInflight waiting requests, one more is answered 503 at once; and
// claims, which never touch MySQL, go on being admitted.
func TestAHungMySQLGetsBoundedAnswers(t *testing.T) {
	m := testsrv.NewMariaDB(t)
	dsn, err := m.CreateDatabase("hung")
	require.NoError(t, err)
	env := testenv.NewOn(t, 4, dsn)
	const timeout = 3 * time.Second
	reg := prometheus.NewRegistry()
	f := newFixtureOn(t, env, gateway.Config{MySQLTimeout: timeout, MySQLMaxInflight: 2}, gateway.WithRegistry(reg))
	v := f.createVoucher(`{"name":"hung","stock":10,"per_user_limit":1}`)
	res := f.do("POST", "/v1/vouchers/"+v+"/orders", f.token("alice"), "")
	require.Equal(t, http.StatusAccepted, res.Status, res.Raw)
	id := res.Body["order_id"].(string)

	require.NoError(t, m.Pause())
	t.Cleanup(func() { _ = m.Resume() })

	// Three buyers' requests for the two slots: two wait on the frozen
	// server (the operator's requests have slots of their own), one is
	// shed, whichever starts last on a busy machine...
	var wg sync.WaitGroup
	results := make([]response, 3)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = f.do("GET", "/v1/orders?voucher_id="+v, f.token("alice"), "")
		}()
	}
	// ...and one more is shed at once (it does not wait for a slot), or
	// waits in a slot a holder had not yet taken, and one of them is.
	testenv.Eventually(t, 10*time.Second, "a request shed", func() bool {
		r := f.do("GET", "/v1/orders/"+id, f.token("alice"), "")
		return r.Status == http.StatusServiceUnavailable && r.Body["error"] == "unavailable" &&
			testenv.Metric(t, reg, "flashsale_mysql_requests_shed_total") >= 1
	})
	wg.Wait()
	for _, r := range results {
		requireError(t, r, http.StatusServiceUnavailable, "unavailable")
		require.Equal(t, "1", r.Header.Get("Retry-After"))
	}

	// Each request ends at its deadline: well before the 30s a client gives
	// up after (the bound is loose so a loaded machine does not fail it).
	start := time.Now()
	r := f.do("POST", "/v1/orders/"+id+"/pay", f.token("alice"), "")
	requireError(t, r, http.StatusServiceUnavailable, "unavailable")
	require.Less(t, time.Since(start), 10*time.Second)

	// Claims never wait on MySQL.
	res = f.do("POST", "/v1/vouchers/"+v+"/orders", f.token("bob"), "")
	require.Equal(t, http.StatusAccepted, res.Status, res.Raw)

	require.NoError(t, m.Resume())
	testenv.Eventually(t, 30*time.Second, "answers again", func() bool {
		r := f.do("GET", "/admin/v1/vouchers/"+v, admin, "")
		return r.Status == http.StatusOK
	})
}

// A voucher created while Redis is down exists (201: a 503 would invite a
// second one), and the reaper puts it on sale once Redis is back.
func TestAVoucherCreatedWhileRedisIsDownGoesOnSaleLater(t *testing.T) {
	env := testenv.New(t, 4)
	f := newFixtureOn(t, env, gateway.Config{ClaimTimeout: 300 * time.Millisecond})
	require.NoError(t, env.Redis.Stop())
	id := f.createVoucher(`{"name":"later","stock":3}`)
	requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("a"), ""), http.StatusServiceUnavailable, "unavailable")
	require.NoError(t, env.Redis.Start())
	require.NoError(t, env.RDB.EnsureGroups(context.Background()))
	// This Redis came back empty: not loaded until the reaper's pass.
	requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("a"), ""), http.StatusServiceUnavailable, "unavailable")

	r, err := reaper.New(reaper.Config{Config: worker.Config{Consumer: "reaper"}}, env.RDB, env.DB, zaptest.NewLogger(t))
	require.NoError(t, err)
	_, err = r.RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("a"), "").Status)
	status := f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
	require.EqualValues(t, 2, status.Body["remaining_redis"], status.Raw)
}
