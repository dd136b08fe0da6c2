package gateway_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
)

// scriptRuns is how many scripts (EVALSHA and EVAL) the test's Redis ran.
func scriptRuns(t *testing.T, f *fixture) int64 {
	t.Helper()
	info, err := f.env.RDB.Client().Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	var n int64
	for _, line := range strings.Split(info, "\n") {
		if strings.HasPrefix(line, "cmdstat_evalsha:calls=") || strings.HasPrefix(line, "cmdstat_eval:calls=") {
			calls, _, _ := strings.Cut(strings.SplitN(line, "=", 2)[1], ",")
			c, err := strconv.ParseInt(calls, 10, 64)
			require.NoError(t, err)
			n += c
		}
	}
	return n
}

// Once Redis answered sold_out, the gateway answers further claims itself
// for FLASHSALE_SOLD_OUT_REFRESH; a unit given back is sold again by the
// first claim after that, and not before.
func TestSoldOutClaimsArePrunedForTheRefreshPeriod(t *testing.T) {
	var clock atomic.Int64 // the pruning's monotonic clock, nanoseconds
	const refresh = 200 * time.Millisecond
	f := newFixtureOn(t, testenv.New(t, 4), gateway.Config{SoldOutRefresh: refresh},
		gateway.WithPruneClock(func() int64 { return clock.Load() }))
	id := f.createVoucher(`{"name":"p","stock":1}`)
	claimPath := "/v1/vouchers/" + id + "/orders"
	alice := f.token("alice")
	first := f.do("POST", claimPath, alice, "", "Idempotency-Key", "k1")
	require.Equal(t, http.StatusAccepted, first.Status, first.Raw)
	requireError(t, f.do("POST", claimPath, f.token("bob"), ""), http.StatusConflict, "sold_out")

	runs := scriptRuns(t, f)
	for i := range 50 {
		requireError(t, f.do("POST", claimPath, f.token("u"+strconv.Itoa(i)), ""), http.StatusConflict, "sold_out")
	}
	require.Equal(t, runs, scriptRuns(t, f), "sold-out claims are answered without Redis")

	// A retry under an Idempotency-Key is never pruned: it gets its order.
	again := f.do("POST", claimPath, alice, "", "Idempotency-Key", "k1")
	require.Equal(t, http.StatusAccepted, again.Status, again.Raw)
	require.Equal(t, first.Body["order_id"], again.Body["order_id"])

	// The unit comes back (a cancellation, through another replica: the
	// one that takes it clears its own flag at once).
	f.persist(id)
	other := newFixtureOn(t, f.env, gateway.Config{SoldOutRefresh: refresh})
	require.Equal(t, http.StatusOK, other.do("POST", "/v1/orders/"+first.Body["order_id"].(string)+"/cancel", alice, "").Status)
	runs = scriptRuns(t, f)
	clock.Store(int64(refresh - time.Millisecond))
	requireError(t, f.do("POST", claimPath, f.token("carol"), ""), http.StatusConflict, "sold_out")
	require.Equal(t, runs, scriptRuns(t, f), "still within the refresh period")

	clock.Store(int64(refresh))
	res := f.do("POST", claimPath, f.token("carol"), "")
	require.Equal(t, http.StatusAccepted, res.Status, "sold again once the period is over: %s", res.Raw)
	require.Equal(t, runs+1, scriptRuns(t, f))

	// Sold out again: one claim per period asks Redis, the rest are pruned.
	clock.Store(int64(2 * refresh))
	requireError(t, f.do("POST", claimPath, f.token("dave"), ""), http.StatusConflict, "sold_out")
	clock.Store(int64(4 * refresh))
	runs = scriptRuns(t, f)
	for i := range 10 {
		requireError(t, f.do("POST", claimPath, f.token("v"+strconv.Itoa(i)), ""), http.StatusConflict, "sold_out")
	}
	require.Equal(t, runs+1, scriptRuns(t, f), "the first claim after the period asks Redis, once")
}

// A claim for more units than are left does not prune smaller claims.
func TestPruningKeepsSmallerQuantities(t *testing.T) {
	var clock atomic.Int64
	f := newFixtureOn(t, testenv.New(t, 4), gateway.Config{SoldOutRefresh: time.Second},
		gateway.WithPruneClock(func() int64 { return clock.Load() }))
	id := f.createVoucher(`{"name":"q","stock":3,"per_user_limit":5}`)
	claimPath := "/v1/vouchers/" + id + "/orders"
	requireError(t, f.do("POST", claimPath, f.token("a"), `{"quantity":4}`), http.StatusConflict, "sold_out")
	requireError(t, f.do("POST", claimPath, f.token("b"), `{"quantity":5}`), http.StatusConflict, "sold_out")
	require.Equal(t, http.StatusAccepted, f.do("POST", claimPath, f.token("c"), `{"quantity":3}`).Status)
}

// A hot voucher through the API: created over buckets, sold whole, and
// the fields it refuses.
func TestHotVoucherThroughTheAPI(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"hot","stock":40,"stock_buckets":4}`)
	v := f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
	require.EqualValues(t, 4, v.Body["stock_buckets"])
	require.EqualValues(t, 40, v.Body["remaining_redis"])
	for i := range 45 {
		res := f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("u"+strconv.Itoa(i)), "")
		if i < 40 {
			require.Equal(t, http.StatusAccepted, res.Status, "claim %d: %s", i, res.Raw)
		} else {
			requireError(t, res, http.StatusConflict, "sold_out")
		}
	}
	f.persist(id)
	v = f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
	require.EqualValues(t, 0, v.Body["remaining_redis"])
	require.EqualValues(t, 0, v.Body["remaining_mysql"])

	for _, body := range []string{
		`{"name":"x","stock":4,"stock_buckets":0}`,
		`{"name":"x","stock":4,"stock_buckets":65}`,
		`{"name":"x","stock":4,"stock_buckets":"3"}`,
		`{"name":"x","kind":"envelope","total_amount":1000,"count":10,"stock_buckets":2}`,
	} {
		requireError(t, f.do("POST", "/admin/v1/vouchers", admin, body), http.StatusBadRequest, "invalid_field")
	}
}

// One account claiming more units than are left, with
// and without an Idempotency-Key, got real sold_out answers from Redis and
// renewed the flag, so everyone else's claims of one unit were answered
// sold_out by the gateway though a unit was back. Only a sold_out that
// covers the flag's quantity renews it, and keyed claims never do.
func TestOneAccountCannotKeepAVoucherSoldOut(t *testing.T) {
	var clock atomic.Int64
	const refresh = 200 * time.Millisecond
	f := newFixtureOn(t, testenv.New(t, 4), gateway.Config{SoldOutRefresh: refresh},
		gateway.WithPruneClock(func() int64 { return clock.Load() }))
	id := f.createVoucher(`{"name":"p","stock":1,"per_user_limit":5}`)
	claimPath := "/v1/vouchers/" + id + "/orders"
	alice := f.token("alice")
	first := f.do("POST", claimPath, alice, "")
	require.Equal(t, http.StatusAccepted, first.Status, first.Raw)
	requireError(t, f.do("POST", claimPath, f.token("bob"), ""), http.StatusConflict, "sold_out") // the flag, for 1 unit
	f.persist(id)
	// Cancelled through another replica: this one's flag stands.
	other := newFixtureOn(t, f.env, gateway.Config{SoldOutRefresh: refresh})
	require.Equal(t, http.StatusOK, other.do("POST", "/v1/orders/"+first.Body["order_id"].(string)+"/cancel", alice, "").Status)

	// mallory claims 5 units, keyed and not, through the whole period and
	// past it: every answer is a real sold_out from Redis.
	mallory := f.token("mallory")
	for i := range 8 {
		clock.Store(int64(i) * int64(refresh) / 4)
		requireError(t, f.do("POST", claimPath, mallory, `{"quantity":5}`, "Idempotency-Key", "m"+strconv.Itoa(i)), http.StatusConflict, "sold_out")
		requireError(t, f.do("POST", claimPath, mallory, `{"quantity":5}`), http.StatusConflict, "sold_out")
	}
	clock.Store(int64(2 * refresh))
	res := f.do("POST", claimPath, f.token("carol"), "")
	require.Equal(t, http.StatusAccepted, res.Status, "the unit back is sold within one period: %s", res.Raw)
}

// Units given back through a replica (a top-up, a cancellation) are sold
// by that replica at once, not a refresh period later: its flag goes.
func TestTopUpAndCancelClearThisReplicasFlag(t *testing.T) {
	var clock atomic.Int64 // never moves: only the clearing can let a claim through
	f := newFixtureOn(t, testenv.New(t, 4), gateway.Config{SoldOutRefresh: time.Minute},
		gateway.WithPruneClock(func() int64 { return clock.Load() }))
	id := f.createVoucher(`{"name":"t","stock":1}`)
	claimPath := "/v1/vouchers/" + id + "/orders"
	first := f.do("POST", claimPath, f.token("a"), "")
	require.Equal(t, http.StatusAccepted, first.Status, first.Raw)
	requireError(t, f.do("POST", claimPath, f.token("b"), ""), http.StatusConflict, "sold_out") // Redis says so: the flag
	runs := scriptRuns(t, f)
	requireError(t, f.do("POST", claimPath, f.token("b"), ""), http.StatusConflict, "sold_out")
	require.Equal(t, runs, scriptRuns(t, f), "pruned: no script ran")

	require.Equal(t, http.StatusOK, f.do("PATCH", "/admin/v1/vouchers/"+id, admin, `{"add_stock":1}`).Status)
	require.Equal(t, http.StatusAccepted, f.do("POST", claimPath, f.token("b"), "").Status, "the top-up sells at once")
	requireError(t, f.do("POST", claimPath, f.token("c"), ""), http.StatusConflict, "sold_out")

	f.persist(id)
	require.Equal(t, http.StatusOK, f.do("POST", "/v1/orders/"+first.Body["order_id"].(string)+"/cancel", f.token("a"), "").Status)
	require.Equal(t, http.StatusAccepted, f.do("POST", claimPath, f.token("c"), "").Status, "the cancelled unit sells at once")
}
