package harness_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// Every answer a buyer gets is the truth while Redis freezes (SIGSTOP: a
// hung host, connections open, nothing answered) for 2 s, then 10 s,
// under 64 connections of claims, half with an Idempotency-Key: a claim
// answered 503 unavailable (or 409) holds no order, one answered 202 its
// order, and one answered 503 outcome_unknown resolves, through its
// claim_id, to what MySQL holds once the pipeline has settled.
func TestEveryAnswerIsTheTruthWhileRedisFreezes(t *testing.T) {
	t.Parallel() // it mostly waits (see TestMain)
	if testing.Short() {
		t.Skip("a stack of the real binaries, Redis frozen twice")
	}
	ctx := context.Background()
	s, v := truthStack(t, harness.Options{Partitions: 2})
	rep, err := s.SaleThroughFreezes(ctx, harness.FreezeConfig{Voucher: v, Logf: t.Logf, Conns: 64, Freezes: []time.Duration{2 * time.Second, 10 * time.Second}})
	requireTruth(t, rep, err)
	require.Positive(t, rep.OutcomeUnknown, "no claim was in flight at a freeze: the test has no power")
	require.Positive(t, rep.Answers["503 unavailable"], "no claim waited to be sent during a freeze: the test has no power")
}

// The same on a 3-master Redis Cluster: the voucher's master frozen 2 s,
// then 10 s (the other masters answer on).
func TestEveryAnswerIsTheTruthWhileAClusterMasterFreezes(t *testing.T) {
	t.Parallel() // it mostly waits (see TestMain)
	if testing.Short() {
		t.Skip("a stack of the real binaries on a cluster, a master frozen twice")
	}
	ctx := context.Background()
	s, v := truthStack(t, harness.Options{Partitions: 4, Cluster: true})
	master, err := s.Cluster.MasterOf(ctx, rdb.StreamKey(s.RDB.PartitionOf(v)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = master.Resume() })
	rep, err := s.SaleThroughFreezes(ctx, harness.FreezeConfig{Voucher: v, Logf: t.Logf, Conns: 64, Freezes: []time.Duration{2 * time.Second, 10 * time.Second},
		Freeze: func(d time.Duration) error {
			if err := master.Pause(); err != nil {
				return err
			}
			time.Sleep(d) // the fault's length
			return master.Resume()
		}})
	requireTruth(t, rep, err)
	require.Positive(t, rep.OutcomeUnknown, "no claim was in flight at a freeze: the test has no power")
}

// A gateway kill -9ed while Redis is frozen, after it answered claims
// outcome_unknown and with their calls in flight: its outcomes were never
// recorded, and the claims resolve through another gateway (the one that
// replaces it) from the buyers' orders and keys, to what MySQL holds.
func TestClaimsOfAGatewayKilledWithCallsInFlightResolve(t *testing.T) {
	t.Parallel() // it mostly waits (see TestMain)
	if testing.Short() {
		t.Skip("a stack of the real binaries, its gateway killed")
	}
	ctx := context.Background()
	// A claim the killed gateway never heard back about is refused by
	// time once no reply can come (FLASHSALE_CLAIM_OUTCOME_TIMEOUT and a
	// second after it): 8 s, not 30, outlasts the 3 s freeze with room
	// to spare, and is what most of this test waited for.
	s, v := truthStack(t, harness.Options{Partitions: 2, Env: []string{"FLASHSALE_CLAIM_OUTCOME_TIMEOUT=8s"}})
	rep, err := s.SaleThroughFreezes(ctx, harness.FreezeConfig{Voucher: v, Logf: t.Logf, Conns: 64, Freezes: []time.Duration{3 * time.Second},
		Freeze: func(d time.Duration) error {
			if err := s.Redis.Pause(); err != nil {
				return err
			}
			time.Sleep(d / 2) // claims sent before the freeze are answered outcome_unknown (1 s)
			s.Gateway.Kill()
			time.Sleep(d / 2)
			if err := s.Redis.Resume(); err != nil {
				return err
			}
			return s.StartGateway(ctx)
		}})
	requireTruth(t, rep, err)
	require.Positive(t, rep.OutcomeUnknown, "no claim was answered outcome_unknown before the kill: the test has no power")
}

// truthStack is a stack of the real binaries (a worker, a reaper) with
// o's topology, claims sent within 300 ms, and a voucher never sold out:
// every claim is decided by what Redis did, not the stock.
func truthStack(t *testing.T, o harness.Options) (*harness.Stack, int64) {
	t.Helper()
	ctx := context.Background()
	o.Dir, o.Workers, o.Reaper = t.TempDir(), 1, true
	o.Progress = func(what string, took time.Duration) { t.Logf("%s: %s", what, took.Round(time.Millisecond)) }
	o.Env = append([]string{"FLASHSALE_CLAIM_TIMEOUT=300ms", "FLASHSALE_USER_RATE=0"}, o.Env...)
	s, err := harness.StartStack(ctx, o)
	require.NoError(t, err)
	t.Cleanup(func() {
		if s.Redis != nil {
			_ = s.Redis.Resume()
		}
		_ = s.Close()
	})
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "truth", Stock: 100_000, PerUserLimit: 1})
	require.NoError(t, err)
	return s, v
}

// requireTruth fails unless every answer of the sale was the truth.
func requireTruth(t *testing.T, rep *harness.FreezeReport, err error) {
	t.Helper()
	require.NoError(t, err)
	t.Logf("answers: %v; outcome_unknown %d, resolved %d (%d admitted); misled %d", rep.Answers, rep.OutcomeUnknown, rep.Resolved, rep.ResolvedOrders, len(rep.Misled))
	require.Empty(t, rep.Misled, "answers that were not the truth:\n%s", strings.Join(rep.Misled, "\n"))
	require.Equal(t, rep.OutcomeUnknown, rep.Resolved)
}

// The same with the gateway's link to Redis slow, not Redis: every answer
// of Redis 600 ms late (toxiproxy; above FLASHSALE_REDIS_TIMEOUT) for 3 s.
func TestEveryAnswerIsTheTruthOverASlowLinkToRedis(t *testing.T) {
	t.Parallel() // it mostly waits (see TestMain)
	if testing.Short() {
		t.Skip("a stack of the real binaries, its gateway's Redis link slowed twice")
	}
	ctx := context.Background()
	s, v := truthStack(t, harness.Options{Partitions: 2})
	proxy := testsrv.NewProxy(t, s.Redis.Addr)
	require.NoError(t, s.Gateway.Stop(20*time.Second))
	require.NoError(t, s.StartGatewayWith(ctx, "FLASHSALE_REDIS_ADDR="+proxy.Addr))
	rep, err := s.SaleThroughFreezes(ctx, harness.FreezeConfig{Voucher: v, Logf: t.Logf, Conns: 64, Freezes: []time.Duration{3 * time.Second},
		Freeze: func(d time.Duration) error {
			if err := proxy.Delay(600 * time.Millisecond); err != nil {
				return err
			}
			time.Sleep(d) // the fault's length
			proxy.Heal()
			return nil
		}})
	requireTruth(t, rep, err)
}

// An envelope grab's money goes only to a buyer told so: Redis frozen 2 s
// during a grab of 20,000 envelopes; every amount told (a 202's, a
// resolution's) is the envelope MySQL holds for its buyer, and the money
// told is the money held.
func TestEnvelopeMoneyGoesOnlyToBuyersToldSoWhileRedisFreezes(t *testing.T) {
	t.Parallel() // it mostly waits (see TestMain)
	if testing.Short() {
		t.Skip("a stack of the real binaries, Redis frozen")
	}
	ctx := context.Background()
	s, _ := truthStack(t, harness.Options{Partitions: 2})
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "red envelopes", Kind: "envelope", TotalAmount: 2_000_000, Count: 20_000, MinAmount: 1, PerUserLimit: 1})
	require.NoError(t, err)
	rep, err := s.SaleThroughFreezes(ctx, harness.FreezeConfig{Voucher: v, Logf: t.Logf, Conns: 64, Freezes: []time.Duration{2 * time.Second}})
	requireTruth(t, rep, err)
	require.Positive(t, rep.MoneyHeld)
	require.Equal(t, rep.MoneyHeld, rep.MoneyTold, "money granted is money told")
}

// A claim whose call is held in the gateway kernel's send queue past its
// horizon is never admitted after a refusal: Redis is cut off (its
// namespace drops every packet) for longer than
// FLASHSALE_CLAIM_OUTCOME_TIMEOUT and a second while one buyer claims.
// The claim is answered outcome_unknown; its connection is closed at its
// read timeout, and the kernel goes on retransmitting the call. After the
// heal the buyer asks about the claim until the held call has reached
// Redis and run (the stream's last id moves past the one before it); no
// answer ever changes from one decision to another, and the last equals
// MySQL.
func TestAClaimHeldPastItsHorizonIsNeverAdmittedAfterARefusal(t *testing.T) {
	t.Parallel() // it mostly waits (see TestMain)
	skipWithoutNetns(t)
	ctx := context.Background()
	s, v := truthStack(t, harness.Options{Partitions: 1, RedisNetns: true, Env: []string{"FLASHSALE_CLAIM_OUTCOME_TIMEOUT=3s"}})
	client := harness.NewClient(s.URL, 4)
	vid := strconv.FormatInt(v, 10)
	var body struct {
		Code    string `json:"error"`
		ClaimID string `json:"claim_id"`
	}
	// A claim first: the admission connection is open, so the buyer's is
	// written at once, into a connection the cut leaves open.
	status, err := client.Do(ctx, "POST", "/v1/vouchers/"+vid+"/orders", s.Token("warm"), nil, &body)
	require.NoError(t, err)
	require.Equal(t, 202, status)
	lastID := func() string {
		info, err := s.RDB.Client().XInfoStream(ctx, rdb.StreamKey(0)).Result()
		require.NoError(t, err)
		return info.LastGeneratedID
	}
	before := lastID()

	require.NoError(t, s.RedisNet.Cut())
	cut := time.Now()
	status, err = client.Do(ctx, "POST", "/v1/vouchers/"+vid+"/orders", s.Token("buyer"), nil, &body)
	require.NoError(t, err)
	require.Equal(t, 503, status)
	require.Equal(t, "outcome_unknown", body.Code)
	// Past the claim's horizon (3 s after it, rounded up to a second) and
	// the margin: the partition lasts 6 s.
	time.Sleep(6*time.Second - time.Since(cut)) // the fault's length, not a wait for anything
	require.NoError(t, s.RedisNet.Heal())

	var told []string
	ask := func() string {
		var out struct {
			Status  string `json:"status"`
			OrderID string `json:"order_id"`
		}
		status, err := client.Do(ctx, "GET", "/v1/vouchers/"+vid+"/claims/"+body.ClaimID, s.Token("buyer"), nil, &out)
		if err != nil || status != 200 {
			return "no answer"
		}
		if len(told) == 0 || told[len(told)-1] != out.Status+" "+out.OrderID {
			told = append(told, out.Status+" "+out.OrderID)
		}
		return out.Status
	}
	testenv.Eventually(t, 2*time.Minute, "the held call to reach Redis and run, the claim decided", func() bool {
		decided := ask() != "unknown"
		ran := false
		if info, err := s.RDB.Client().XInfoStream(ctx, rdb.StreamKey(0)).Result(); err == nil {
			ran = info.LastGeneratedID != before
		}
		return decided && ran
	})
	for range 10 { // and a while after it ran
		ask()
		time.Sleep(100 * time.Millisecond) // spacing the asks, not a wait for anything
	}
	t.Logf("the buyer was told, in turn: %q (the held call ran %s after the cut)", told, time.Since(cut).Round(time.Second))
	decisions := 0
	for _, w := range told {
		if !strings.HasPrefix(w, "unknown") && w != "no answer" {
			decisions++
		}
	}
	require.Equal(t, 1, decisions, "one decision, never changed: %q", told)
	testenv.Eventually(t, time.Minute, "the pipeline drained", func() bool { ok, _ := s.Drained(ctx); return ok })
	var held []int64
	require.NoError(t, s.DB.DB().Raw("SELECT id FROM orders WHERE voucher_id = ? AND user_id = 'buyer'", v).Scan(&held).Error)
	final := told[len(told)-1]
	if len(held) == 0 {
		require.Equal(t, "refused ", final)
	} else {
		require.Equal(t, "admitted "+strconv.FormatInt(held[0], 10), final)
	}
}

// A gateway SIGTERMed while Redis is frozen, with claims it answered
// outcome_unknown still in flight, exits within FLASHSALE_SHUTDOWN_TIMEOUT
// and a second (it cuts its admission connections at the bound, not when
// FLASHSALE_CLAIM_OUTCOME_TIMEOUT would end them), and every claim it
// answered resolves, through the gateway that replaces it, to what MySQL
// holds.
func TestAGatewayStopsWithinItsShutdownTimeoutWhileRedisIsFrozen(t *testing.T) {
	t.Parallel() // it mostly waits (see TestMain)
	if testing.Short() {
		t.Skip("a stack of the real binaries, its gateway stopped while Redis is frozen")
	}
	ctx := context.Background()
	const shutdownTimeout = 2 * time.Second
	s, v := truthStack(t, harness.Options{Partitions: 2, Env: []string{"FLASHSALE_SHUTDOWN_TIMEOUT=" + shutdownTimeout.String(),
		"FLASHSALE_CLAIM_OUTCOME_TIMEOUT=8s"}})
	var took time.Duration
	rep, err := s.SaleThroughFreezes(ctx, harness.FreezeConfig{Voucher: v, Logf: t.Logf, Conns: 64, Freezes: []time.Duration{4 * time.Second},
		Freeze: func(d time.Duration) error {
			if err := s.Redis.Pause(); err != nil {
				return err
			}
			time.Sleep(1500 * time.Millisecond) // claims sent before the freeze are answered outcome_unknown (1 s)
			sent := time.Now()
			if err := s.Gateway.Signal(syscall.SIGTERM); err != nil {
				return err
			}
			if err := s.Gateway.Wait(); err != nil {
				return fmt.Errorf("the gateway's exit: %w", err)
			}
			took = time.Since(sent)
			time.Sleep(d - 1500*time.Millisecond - took) // the rest of the freeze
			if err := s.Redis.Resume(); err != nil {
				return err
			}
			return s.StartGateway(ctx)
		}})
	if took >= shutdownTimeout+time.Second { // where the time went, from the gateway's own lines
		if b, rerr := os.ReadFile(s.Gateway.LogPath); rerr == nil {
			t.Logf("the gateway's log, its end:\n%s", b[max(0, len(b)-4000):])
		}
	}
	requireTruth(t, rep, err)
	t.Logf("the gateway exited %s after SIGTERM", took.Round(time.Millisecond))
	require.Less(t, took, shutdownTimeout+time.Second, "exit within FLASHSALE_SHUTDOWN_TIMEOUT and a second")
	require.Positive(t, rep.OutcomeUnknown, "no claim was answered outcome_unknown before the SIGTERM: the test has no power")
}
