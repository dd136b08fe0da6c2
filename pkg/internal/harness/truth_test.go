package harness_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
)

// Every answer a buyer gets is the truth while Redis freezes (SIGSTOP: a
// hung host, connections open, nothing answered) for 2 s, then 10 s,
// under 64 connections of claims, half with an Idempotency-Key: a claim
// answered 503 unavailable (or 409) holds no order, one answered 202 its
// order, and one answered 503 outcome_unknown resolves, through its
// claim_id, to what MySQL holds once the pipeline has settled.
func TestEveryAnswerIsTheTruthWhileRedisFreezes(t *testing.T) {
	if testing.Short() {
		t.Skip("a stack of the real binaries, Redis frozen twice")
	}
	ctx := context.Background()
	s, err := harness.StartStack(ctx, harness.Options{Dir: t.TempDir(), Workers: 1, Partitions: 2, Reaper: true,
		Env: []string{"FLASHSALE_CLAIM_TIMEOUT=300ms", "FLASHSALE_USER_RATE=0"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Redis.Resume(); _ = s.Close() })
	const conns = 64
	stock := int64(100_000) // never sold out: every claim decided by Redis's state, not the stock
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "truth", Stock: stock, PerUserLimit: 1})
	require.NoError(t, err)
	vid := strconv.FormatInt(v, 10)
	client := harness.NewClient(s.URL, conns)

	type answer struct {
		user, key        string
		status           int
		code, order      string
		claimID          string
		resolved, reason string // an outcome_unknown's resolution
	}
	var mu sync.Mutex
	var answers []*answer
	var next, answered atomic.Int64
	claim := func(user string) {
		var body struct {
			Code    string `json:"error"`
			OrderID string `json:"order_id"`
			ClaimID string `json:"claim_id"`
		}
		a := &answer{user: user}
		if next.Load()%2 == 0 {
			a.key = "k-" + user
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		status, err := client.Do(cctx, "POST", "/v1/vouchers/"+vid+"/orders", s.Token(user), nil, &body, "Idempotency-Key", a.key)
		if err != nil {
			status = 0
		}
		a.status, a.code, a.order, a.claimID = status, body.Code, body.OrderID, body.ClaimID
		mu.Lock()
		answers = append(answers, a)
		mu.Unlock()
		answered.Add(1)
	}
	freeze := func(d time.Duration) {
		at := answered.Load()
		testenv.Eventually(t, time.Minute, "100 answers before the freeze", func() bool { return answered.Load() >= at+100 })
		require.NoError(t, s.Redis.Pause())
		time.Sleep(d) // the fault's length, not a wait for anything
		require.NoError(t, s.Redis.Resume())
		at = answered.Load()
		testenv.Eventually(t, time.Minute, "100 answers after the freeze", func() bool { return answered.Load() >= at+100 })
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				claim(fmt.Sprintf("u%d", next.Add(1)))
			}
		}()
	}
	freeze(2 * time.Second)
	freeze(10 * time.Second)
	close(stop)
	wg.Wait()

	// Each outcome_unknown asked for until known.
	unknown := 0
	for _, a := range answers {
		if a.status != 503 || a.code != "outcome_unknown" {
			continue
		}
		unknown++
		require.NotEmpty(t, a.claimID, "outcome_unknown without a claim_id")
		testenv.Eventually(t, 90*time.Second, "claim "+a.claimID+" resolved", func() bool {
			var out struct {
				Status  string `json:"status"`
				OrderID string `json:"order_id"`
				Error   string `json:"error"`
			}
			status, err := client.Do(ctx, "GET", "/v1/vouchers/"+vid+"/claims/"+a.claimID, s.Token(a.user), nil, &out)
			if err != nil || status != 200 || out.Status == "unknown" {
				return false
			}
			a.resolved, a.order, a.reason = out.Status, out.OrderID, out.Error
			return true
		})
	}
	testenv.Eventually(t, 90*time.Second, "drained", func() bool { ok, _ := s.Drained(ctx); return ok })

	var live []struct {
		ID     int64
		UserID string
	}
	require.NoError(t, s.DB.DB().WithContext(ctx).Raw(
		"SELECT id, user_id FROM orders WHERE voucher_id = ? AND status IN ('created', 'paid', 'completed')", v).Scan(&live).Error)
	held := map[string]int64{}
	for _, o := range live {
		require.Zero(t, held[o.UserID], "user %s holds two orders", o.UserID)
		held[o.UserID] = o.ID
	}
	counts := map[string]int{}
	var misled []string
	for _, a := range answers {
		what := strconv.Itoa(a.status) + " " + a.code
		if a.status == 0 {
			what = "no answer"
		}
		counts[what]++
		admitted := a.status == 202 || a.resolved == "admitted"
		switch {
		case a.status == 0: // no answer: nothing was told
		case admitted && strconv.FormatInt(held[a.user], 10) != a.order:
			misled = append(misled, fmt.Sprintf("%s told admitted (%s %s, order %s) holds order %d", a.user, what, a.resolved, a.order, held[a.user]))
		case !admitted && held[a.user] != 0:
			misled = append(misled, fmt.Sprintf("%s told not admitted (%s %s %s) holds order %d", a.user, what, a.resolved, a.reason, held[a.user]))
		}
	}
	t.Logf("answers: %v; outcome_unknown %d, all resolved; misled %d", counts, unknown, len(misled))
	require.Empty(t, misled, "answers that were not the truth:\n%s", strings.Join(misled, "\n"))
	require.Positive(t, unknown, "no claim was in flight at a freeze: the test has no power")
	require.Positive(t, counts["503 unavailable"], "no claim waited to be sent during a freeze: the test has no power")
}
