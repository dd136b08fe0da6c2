package harness_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
)

// skipWithoutNetns skips a partition test where network namespaces cannot
// be made, loudly: such a run has not tested partitions.
func skipWithoutNetns(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the binaries")
	}
	if why := testsrv.NetnsUnavailable(); why != "" {
		t.Skipf("SKIPPED: PARTITIONS NOT TESTED: %s", why)
	}
}

// A partition between the gateway and Redis in the middle of a sale: Redis
// runs in a network namespace of its own, and every packet between it and
// the stack is dropped for a while (iptables), connections left open and
// nobody told, so pipelines are cut mid-flight. Claims of unknown outcome
// answer 503 (or nothing); once healed, each is retried with its
// Idempotency-Key until it is decided, and the history checker holds every
// key to MySQL: each 202 exactly one order, each retried unknown exactly
// one answer, no oversell, reconcile clean.
func TestAGatewayCutFromRedisMidPipeline(t *testing.T) {
	skipWithoutNetns(t)
	ctx := context.Background()
	s, err := harness.StartStack(ctx, harness.Options{Dir: t.TempDir(), Workers: 1, Partitions: 2, Reaper: true, RedisNetns: true,
		Env: []string{"FLASHSALE_CLAIM_TIMEOUT=500ms", "FLASHSALE_USER_RATE=0"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	const stock, users, conns = 150, 400, 8
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "partition", Stock: stock, PerUserLimit: 1})
	require.NoError(t, err)

	client := harness.NewClient(s.URL, conns)
	var h harness.History
	claim := func(user string) harness.Attempt {
		key := "k-" + user
		var body struct {
			Code    string `json:"error"`
			OrderID string `json:"order_id"`
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		status, err := client.Do(cctx, "POST", "/v1/vouchers/"+itoa(v)+"/orders", s.Token(user), nil, &body, "Idempotency-Key", key)
		a := harness.Attempt{User: user, Key: key, Status: status, Code: body.Code, OrderID: body.OrderID, At: time.Now()}
		if err != nil {
			a.Status, a.Err = 0, err.Error()
		}
		h.Add(a)
		return a
	}

	// The cut starts after 100 answers and heals after 40 more, or 10 s.
	var answered atomic.Int64
	cut, healed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(healed)
		testenv.Eventually(t, 60*time.Second, "100 answers", func() bool { return answered.Load() >= 100 })
		require.NoError(t, s.RedisNet.Cut())
		close(cut)
		at := answered.Load()
		deadline := time.Now().Add(10 * time.Second)
		for answered.Load() < at+40 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		require.NoError(t, s.RedisNet.Heal())
	}()
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= users; i = next.Add(1) {
				claim(fmt.Sprintf("u%d", i))
				answered.Add(1)
			}
		}()
	}
	wg.Wait()
	<-healed
	select {
	case <-cut:
	default:
		t.Fatal("the sale ended before the cut")
	}

	// Every unknown outcome is retried with its key until decided.
	unknown := h.Count(func(a harness.Attempt) bool { return a.Unknown() })
	require.Positive(t, unknown, "the cut decided no claim's outcome: the test has no power")
	testenv.Eventually(t, 90*time.Second, "every key decided", func() bool {
		undecided := 0
		for _, a := range h.Last() {
			if a.Unknown() {
				undecided++
				claim(a.User)
			}
		}
		return undecided == 0
	})
	testenv.Eventually(t, 60*time.Second, "drained", func() bool { ok, _ := s.Drained(ctx); return ok })
	bad := s.CheckHistory(ctx, &h, v, stock)
	require.Empty(t, bad, "violations:\n%s", strings.Join(bad, "\n"))
	t.Logf("%d claims, %d answers of unknown outcome during the cut, all decided on retry", users, unknown)
}
