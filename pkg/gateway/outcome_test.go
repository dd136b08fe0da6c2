package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gorm.io/gorm"

	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/wait"
)

// outcomeFixture is a gateway whose claims wait 300 ms for a reply, and
// which listens for late replies a minute (admitClient) or as long as its
// store's client reads (2 s: a reply later than that is lost), and tells
// a claim with no order refused outcome after it.
func outcomeFixture(t *testing.T, admitClient bool, outcome time.Duration) *fixture {
	env := testenv.New(t, 1)
	var opts []gateway.Option
	if admitClient {
		ac, err := env.Common.AdmitClient(8, time.Minute)
		require.NoError(t, err)
		t.Cleanup(func() { _ = ac.Close() })
		opts = append(opts, gateway.WithAdmitClient(ac))
	}
	f := newFixtureOn(t, env, gateway.Config{ClaimTimeout: 150 * time.Millisecond, ClaimReplyTimeout: 300 * time.Millisecond,
		ClaimOutcomeTimeout: outcome}, opts...)
	t.Cleanup(func() { _ = env.Redis.Resume() })
	return f
}

// claimFrozen claims voucher id as user while Redis is frozen (SIGSTOP:
// the claim is written, nothing answers) and returns the claim_id of its
// 503 outcome_unknown; Redis is running again when it returns.
func (f *fixture) claimFrozen(id, user string, header ...string) string {
	f.t.Helper()
	return f.claimFrozenFor(0, id, user, header...)
}

// claimFrozenFor is claimFrozen with Redis kept frozen hold after the
// answer: past the store's read timeout (2 s), the reply is lost.
func (f *fixture) claimFrozenFor(hold time.Duration, id, user string, header ...string) string {
	f.t.Helper()
	// A claim first, so the admission connection is open and the frozen
	// claim is written at once.
	f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("warm-"+user), "")
	require.NoError(f.t, f.env.Redis.Pause())
	res := f.do("POST", "/v1/vouchers/"+id+"/orders", f.token(user), "", header...)
	time.Sleep(hold) // the freeze's length, not a wait for anything
	require.NoError(f.t, f.env.Redis.Resume())
	requireError(f.t, res, http.StatusServiceUnavailable, "outcome_unknown")
	require.Equal(f.t, "1", res.Header.Get("Retry-After"))
	claimID, _ := res.Body["claim_id"].(string)
	require.NotEmpty(f.t, claimID, res.Raw)
	return claimID
}

// outcomeOf asks for claim claimID of user until it is known.
func (f *fixture) outcomeOf(id, user, claimID string) response {
	f.t.Helper()
	var res response
	wait.For(f.t, time.Minute, "the claim's outcome", func() bool {
		res = f.do("GET", "/v1/vouchers/"+id+"/claims/"+claimID, f.token(user), "")
		require.Equal(f.t, http.StatusOK, res.Status, res.Raw)
		return res.Body["status"] != "unknown"
	})
	return res
}

// A claim whose reply comes after its time is answered outcome_unknown,
// never "unavailable": it was admitted, and the buyer finds the order by
// its claim_id, as recorded when the reply came.
func TestAClaimAnsweredLateIsToldItsOrder(t *testing.T) {
	f := outcomeFixture(t, true, time.Minute)
	id := f.createVoucher(`{"name":"late","stock":3,"per_user_limit":1}`)
	claimID := f.claimFrozen(id, "buyer")
	res := f.outcomeOf(id, "buyer", claimID)
	require.Equal(t, "admitted", res.Body["status"], res.Raw)
	orderID := res.Body["order_id"].(string)

	// The order is the buyer's, and the only one: a second claim is the limit.
	order := f.do("GET", "/v1/orders/"+orderID, f.token("buyer"), "")
	require.Equal(t, http.StatusOK, order.Status, order.Raw)
	requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("buyer"), ""), http.StatusConflict, "user_limit")
	f.persist(id)
	require.Equal(t, "admitted", f.outcomeOf(id, "buyer", claimID).Body["status"])

	// The sale's report counts it: answered unknown, then admitted.
	wait.For(t, time.Minute, "the report's outcome_unknown_claims", func() bool {
		rep := f.do("GET", "/admin/v1/vouchers/"+id+"/report", admin, "")
		got, _ := rep.Body["outcome_unknown_claims"].(map[string]any)
		return got["answered"] == 1.0 && got["admitted"] == 1.0
	})

	// Only the buyer can ask, only about a claim id a gateway gave.
	requireError(t, f.do("GET", "/v1/vouchers/"+id+"/claims/"+claimID, f.token("thief"), ""), http.StatusNotFound, "claim_not_found")
	other := strconv.FormatInt(parseID(t, id)+1, 10)
	requireError(t, f.do("GET", "/v1/vouchers/"+other+"/claims/"+claimID, f.token("buyer"), ""), http.StatusNotFound, "claim_not_found")
	for _, bad := range []string{"abc", "1.2", "-5." + strings.Repeat("a", 32), "12." + strings.Repeat("z", 32), "12." + strings.Repeat("a", 32) + ".bad key"} {
		requireError(t, f.do("GET", "/v1/vouchers/"+id+"/claims/"+bad, f.token("buyer"), ""), http.StatusBadRequest, "invalid_claim_id")
	}
}

// A refused claim answered late is told its refusal.
func TestAClaimRefusedLateIsToldWhy(t *testing.T) {
	f := outcomeFixture(t, true, time.Minute)
	id := f.createVoucher(`{"name":"gone","stock":1}`)
	claimID := f.claimFrozen(id, "buyer") // the warm-up claim took the unit
	res := f.outcomeOf(id, "buyer", claimID)
	require.Equal(t, "refused", res.Body["status"], res.Raw)
	require.Equal(t, "sold_out", res.Body["error"], res.Raw)
}

// A keyed claim answered late resolves by its key, and a retry with the
// key gets the same order: never two.
func TestAKeyedClaimAnsweredLateResolvesByItsKey(t *testing.T) {
	f := outcomeFixture(t, false, 5*time.Second) // the reply is lost (the store reads 2 s): only the key tells
	id := f.createVoucher(`{"name":"keyed","stock":5,"per_user_limit":3}`)
	claimID := f.claimFrozenFor(3*time.Second, id, "buyer", "Idempotency-Key", "press-1")
	res := f.outcomeOf(id, "buyer", claimID)
	require.Equal(t, "admitted", res.Body["status"], res.Raw)
	retry := f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("buyer"), "", "Idempotency-Key", "press-1")
	require.Equal(t, http.StatusAccepted, retry.Status, retry.Raw)
	require.Equal(t, res.Body["order_id"], retry.Body["order_id"])
}

// A reply lost (the connection timed out before Redis woke, and the
// script ran when it did, before the claim's horizon) leaves the buyer's
// orders to tell: the order the claim made, or, once Redis's clock is
// past the claim's horizon, refused.
func TestAClaimWhoseReplyWasLostResolvesByTheBuyersOrders(t *testing.T) {
	f := outcomeFixture(t, false, 5*time.Second) // the store reads 2 s: a reply later is lost
	id := f.createVoucher(`{"name":"lost","stock":2,"per_user_limit":1}`)
	claimID := f.claimFrozenFor(3*time.Second, id, "buyer")
	res := f.outcomeOf(id, "buyer", claimID)
	require.Equal(t, "admitted", res.Body["status"], res.Raw)
	f.persist(id) // found in MySQL too
	require.Equal(t, res.Body["order_id"], f.outcomeOf(id, "buyer", claimID).Body["order_id"])

	// Sold out now (the warm-up and the buyer): a claim refused, whose
	// reply was lost, has no order; it is unknown until Redis's clock is
	// past its horizon (5 s and a second after it, rounded up to a
	// second), then refused; and so it stays.
	claimID = f.claimFrozenFor(3*time.Second, id, "late")
	res = f.do("GET", "/v1/vouchers/"+id+"/claims/"+claimID, f.token("late"), "")
	require.Equal(t, "unknown", res.Body["status"], res.Raw)
	res = f.outcomeOf(id, "late", claimID)
	require.Equal(t, "refused", res.Body["status"], res.Raw)
	require.Equal(t, "unavailable", res.Body["error"], res.Raw)
	require.Equal(t, res.Body, f.outcomeOf(id, "late", claimID).Body)
}

// An id no gateway gave costs Redis nothing: 10,000 random ones, each
// 400 or 404, and no GET or script call reaches Redis.
func TestRandomClaimIDsNeverReachRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 requests")
	}
	f := outcomeFixture(t, false, time.Minute)
	id := f.createVoucher(`{"name":"probe","stock":1}`)
	calls := func() int64 {
		info, err := f.env.RDB.Client().Info(context.Background(), "commandstats").Result()
		require.NoError(t, err)
		var n int64
		for _, line := range strings.Split(info, "\n") {
			for _, cmd := range []string{"cmdstat_get:", "cmdstat_evalsha:", "cmdstat_eval:"} {
				if rest, ok := strings.CutPrefix(line, cmd); ok {
					calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
					v, _ := strconv.ParseInt(calls, 10, 64)
					n += v
				}
			}
		}
		return n
	}
	before := calls()
	tok := f.token("prober")
	client := &http.Client{}
	for i := range 10_000 {
		var claimID string
		switch i % 4 {
		case 0:
			claimID = fmt.Sprintf("%d.%032x", rand.Int64N(1<<41), rand.Uint64())
		case 1:
			claimID = fmt.Sprintf("%d.%032x.key%d", rand.Int64N(1<<41), rand.Uint64(), i)
		case 2:
			claimID = fmt.Sprintf("%d.%d.%x.%032x", rand.Int64N(1<<41), rand.Int64N(1<<41), rand.Uint32()|1, rand.Uint64())
		default:
			claimID = fmt.Sprintf("x%x", rand.Uint64())
		}
		req, err := http.NewRequest("GET", f.srv.URL+"/v1/vouchers/"+id+"/claims/"+claimID, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := client.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Contains(t, []int{http.StatusBadRequest, http.StatusNotFound}, res.StatusCode, claimID)
	}
	require.Equal(t, before, calls(), "a claim id no gateway gave reached Redis")
}

// Two claims of one buyer in the same millisecond (a double-click; the
// gateway's clock is held, so every claim here is in one millisecond),
// per-user limit 1, sent while Redis is frozen 3 s: 150 buyers, half
// sending both claims with one Idempotency-Key, half with none. Every
// claim has an id of its own, and each resolves to its own truth: the
// claim that made the buyer's order (its serial is the order's) is told
// admitted with that order, its twin refused, or, keyed, the same order
// again; a buyer told only "refused" holds nothing.
func TestSameMillisecondClaimsResolveEachToItsOwnTruth(t *testing.T) {
	if testing.Short() {
		t.Skip("300 claims through a 3 s freeze")
	}
	f := outcomeFixture(t, true, time.Minute)
	id := f.createVoucher(`{"name":"double click","stock":1000,"per_user_limit":1}`)
	f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("warm"), "") // the admission connection open
	const buyers = 150
	type answer struct {
		user, key, claimID, orderID, code string
		status                            int
		resolved                          response
	}
	answers := make([]answer, 2*buyers)
	tokens := make([]string, buyers)
	for b := range buyers {
		tokens[b] = f.token(fmt.Sprintf("b%d", b))
	}
	require.NoError(t, f.env.Redis.Pause())
	var wg sync.WaitGroup
	for i := range answers {
		b := i / 2
		a := &answers[i]
		a.user = fmt.Sprintf("b%d", b)
		if b%2 == 0 {
			a.key = "press-" + a.user
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", f.srv.URL+"/v1/vouchers/"+id+"/orders", nil)
			req.Header.Set("Authorization", "Bearer "+tokens[b])
			if a.key != "" {
				req.Header.Set("Idempotency-Key", a.key)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				a.code = err.Error()
				return
			}
			defer res.Body.Close()
			var body map[string]any
			_ = json.NewDecoder(res.Body).Decode(&body)
			a.status = res.StatusCode
			a.code, _ = body["error"].(string)
			a.claimID, _ = body["claim_id"].(string)
			a.orderID, _ = body["order_id"].(string)
		}()
	}
	wg.Wait()
	time.Sleep(3 * time.Second) // the freeze's length, not a wait for anything
	require.NoError(t, f.env.Redis.Resume())

	ids := map[string]bool{}
	twins := 0
	for i := range answers {
		a := &answers[i]
		require.NotZero(t, a.status, "%s: %s", a.user, a.code)
		if a.code != "outcome_unknown" {
			continue
		}
		require.False(t, ids[a.claimID], "claim id %s given twice", a.claimID)
		ids[a.claimID] = true
		if i%2 == 1 && answers[i-1].code == "outcome_unknown" {
			twins++
		}
		a.resolved = f.outcomeOf(id, a.user, a.claimID)
	}
	t.Logf("%d claims answered outcome_unknown, %d buyers with both", len(ids), twins)
	require.Positive(t, twins, "no buyer had both claims answered outcome_unknown: the test has no power")

	f.persist(id)
	var rows []struct {
		ID          int64
		UserID      string
		ClaimSerial uint64
	}
	require.NoError(t, f.env.DB.DB().Raw("SELECT id, user_id, claim_serial FROM orders WHERE voucher_id = ? AND user_id <> 'warm'", parseID(t, id)).Scan(&rows).Error)
	held := map[string]int64{}
	serialOf := map[string]uint64{}
	for _, o := range rows {
		require.Zero(t, held[o.UserID], "%s holds two orders", o.UserID)
		held[o.UserID], serialOf[o.UserID] = o.ID, o.ClaimSerial
	}
	told := map[string]bool{}
	for i := range answers {
		a := &answers[i]
		order := a.orderID
		admitted := a.status == http.StatusAccepted
		if a.code == "outcome_unknown" {
			admitted = a.resolved.Body["status"] == "admitted"
			order, _ = a.resolved.Body["order_id"].(string)
			// MS.HORIZON.SERIAL.MAC[.KEY]: the serial tells whose claim made the order.
			serial, err := strconv.ParseUint(strings.Split(a.claimID, ".")[2], 16, 64)
			require.NoError(t, err)
			if a.key == "" {
				require.Equal(t, serial == serialOf[a.user] && held[a.user] != 0, admitted,
					"%s's claim %s told %s; the order's serial is %x", a.user, a.claimID, a.resolved.Raw, serialOf[a.user])
			}
		}
		if admitted {
			told[a.user] = true
			require.Equal(t, strconv.FormatInt(held[a.user], 10), order, "%s told admitted with another order", a.user)
		}
	}
	for b := range buyers {
		user := fmt.Sprintf("b%d", b)
		require.Equal(t, held[user] != 0, told[user], "%s holds order %d, told admitted: %v", user, held[user], told[user])
	}
}

// A decided claim is cheap to ask again, and no window of the buyer's
// orders hides it: a claim whose reply was lost, admitted, its order
// persisted and 1,100 later orders of the same buyer and voucher beside
// it, is decided once from MySQL (its time and serial) and recorded; then
// 10,000 asks cost Redis one call each (outcome.lua) and MySQL nothing.
func TestADecidedClaimIsAnsweredFromItsRecord(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 requests")
	}
	f := outcomeFixture(t, false, 5*time.Second) // the store reads 2 s: the reply is lost
	id := f.createVoucher(`{"name":"asked often","stock":5,"per_user_limit":1}`)
	claimID := f.claimFrozenFor(3*time.Second, id, "buyer")
	f.persist(id)
	v := parseID(t, id)
	var own int64
	require.NoError(t, f.env.DB.DB().Raw("SELECT id FROM orders WHERE voucher_id = ? AND user_id = 'buyer'", v).Scan(&own).Error)
	require.NotZero(t, own, "the claim's order persisted")
	later := time.Now().Add(time.Hour)
	for i := range 1100 { // newer orders, by id and time, than the claim's
		require.NoError(t, f.env.DB.DB().Exec(`INSERT INTO orders (id, voucher_id, user_id, day, status, created_at, expires_at, updated_at)
			VALUES (?, ?, 'buyer', '20260101', 'cancelled', ?, ?, ?)`, own+1+int64(i), v, later, later, later).Error)
	}
	queries := countQueries(t, f)
	first := f.outcomeOf(id, "buyer", claimID)
	require.Equal(t, "admitted", first.Body["status"], first.Raw)
	require.Positive(t, queries(), "decided from MySQL")

	// Redis's count of each command (INFO commandstats), the ones the
	// scripts run included.
	redisCalls := func() map[string]int64 {
		info, err := f.env.RDB.Client().Info(context.Background(), "commandstats").Result()
		require.NoError(t, err)
		out := map[string]int64{}
		for _, line := range strings.Split(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
			if !ok {
				continue
			}
			c, _, _ := strings.Cut(rest, ",")
			out[name], _ = strconv.ParseInt(c, 10, 64)
		}
		return out
	}
	before := redisCalls()
	mysqlBefore := queries()
	tok := f.token("buyer")
	for range 10_000 {
		req, err := http.NewRequest("GET", f.srv.URL+"/v1/vouchers/"+id+"/claims/"+claimID, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var out map[string]any
		require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
		res.Body.Close()
		require.Equal(t, first.Body, out)
	}
	after, mysql := redisCalls(), queries()-mysqlBefore
	delta := func(cmd string) int64 { return after[cmd] - before[cmd] }
	all := int64(0)
	for cmd := range after {
		if cmd != "info" {
			all += delta(cmd)
		}
	}
	t.Logf("10,000 asks of a decided claim: %d script calls (evalsha), %d GET and %d TIME in them, %d Redis commands in all with the gateway's own ticks; %d MySQL queries",
		delta("evalsha"), delta("get"), delta("time"), all, mysql)
	require.Zero(t, mysql, "MySQL queries")
	// The asks' own: one outcome.lua each, its GET and its TIME. The
	// gateway's ticks (the rooms' index, once a second) read with HMGET,
	// whatever the run's length.
	require.EqualValues(t, 10_000, delta("evalsha"), "one script call an ask")
	require.EqualValues(t, 10_000, delta("time"), "one TIME an ask, in outcome.lua")
	require.EqualValues(t, 10_000, delta("get"), "one GET an ask, in outcome.lua")
}

// countQueries counts the statements the gateway's MySQL store runs from
// now on (a gorm callback).
func countQueries(t *testing.T, f *fixture) func() int64 {
	var n atomic.Int64
	cb := f.env.DB.DB().Callback()
	count := func(*gorm.DB) { n.Add(1) }
	require.NoError(t, cb.Query().Before("gorm:query").Register("test:count_query", count))
	require.NoError(t, cb.Raw().Before("gorm:raw").Register("test:count_raw", count))
	require.NoError(t, cb.Row().Before("gorm:row").Register("test:count_row", count))
	return n.Load
}
