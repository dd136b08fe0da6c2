package admission_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/internal/wait"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
)

func TestBatcherAdmitsExactlyTheStock(t *testing.T) {
	s := newStore(t, 4)
	seedVoucher(t, s, rdb.Voucher{ID: 21, Stock: 500, PerUserLimit: 1})
	b := testrdb.Admitter(s).NewBatcher(4, 64, time.Second)
	defer b.Close()
	var mu sync.Mutex
	ids := map[int64]bool{}
	perUser := map[string]int{}
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				user := fmt.Sprintf("u%d", (g*40+i)%1500) // some users claim twice
				a, err := b.Admit(context.Background(), admission.Claim{VoucherID: 21, UserID: user, Now: t0, Day: d0})
				if err != nil { // assert, not require: FailNow belongs to the test's goroutine
					assert.ErrorIs(t, err, testrdb.ErrOneOf(err, rdb.ErrSoldOut, rdb.ErrUserLimit))
					continue
				}
				mu.Lock()
				assert.False(t, ids[a.OrderID], "order id handed out twice")
				ids[a.OrderID] = true
				perUser[user]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, ids, 500)
	for u, n := range perUser {
		require.Equal(t, 1, n, u)
	}
	requireStock(t, s, 21, 0)
}

func TestAdmitManyReloadsAFlushedScript(t *testing.T) {
	s := newStore(t, 1)
	ctx := context.Background()
	seedVoucher(t, s, rdb.Voucher{ID: 3, Stock: 5, PerUserLimit: 5})
	require.NoError(t, s.Client().ScriptFlush(ctx).Err()) // as after a Redis restart
	claims := []admission.Claim{{VoucherID: 3, UserID: "a", Now: t0, Day: d0}, {VoucherID: 99, UserID: "a", Now: t0, Day: d0}}
	out, errs, err := testrdb.Admitter(s).AdmitMany(ctx, claims)
	require.NoError(t, err)
	require.NoError(t, errs[0])
	p, _, _ := order.EntryOf(out[0].OrderID)
	require.Equal(t, 0, p)
	require.ErrorIs(t, errs[1], rdb.ErrVoucherNotFound)
	requireStock(t, s, 3, 4)
}

func TestBatcherDoesNotSendWhatTheCallerGaveUpOn(t *testing.T) {
	s := newStore(t, 1)
	seedVoucher(t, s, rdb.Voucher{ID: 4, Stock: 5})
	b := testrdb.Admitter(s).NewBatcher(1, 8, time.Second)
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.Admit(ctx, admission.Claim{VoucherID: 4, UserID: "late", Now: t0, Day: d0})
	require.ErrorIs(t, err, context.Canceled)
	requireStock(t, s, 4, 5)
}

// A claim is answered within the batcher's timeout even when Redis does
// not answer: the claim sent is bounded by its round trip's deadline, and
// one still waiting behind it at its deadline is not sent at all.
func TestBatcherAnswersEachClaimWithinItsTimeout(t *testing.T) {
	srv, s := ownRedis(t)
	seedVoucher(t, s, rdb.Voucher{ID: 5, Stock: 5, PerUserLimit: 5})
	b := testrdb.Admitter(s).NewBatcher(1, 1, 300*time.Millisecond)
	defer b.Close()
	require.NoError(t, srv.Pause()) // a hung host: connections open, no answer
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = b.Admit(context.Background(), admission.Claim{VoucherID: 5, UserID: fmt.Sprintf("paused%d", i), Now: t0, Day: d0})
		}()
	}
	// Redis stays paused until every claim has its answer: a claim that
	// waited for Redis to come back would never return (a minute is the
	// deadline of that condition, not a measure of the timeout).
	answered := make(chan struct{})
	go func() { wg.Wait(); close(answered) }()
	select {
	case <-answered:
	case <-time.After(time.Minute):
		t.Fatal("a claim waited for the paused Redis instead of its timeout")
	}
	// The first claim was sent at once: its outcome is unknown (the script
	// may run when Redis wakes); the others were never sent.
	unknown := 0
	for _, err := range errs {
		require.True(t, errors.Is(err, admission.ErrNotSent) || errors.Is(err, admission.ErrOutcomeUnknown), "%v", err)
		if errors.Is(err, admission.ErrOutcomeUnknown) {
			unknown++
		}
	}
	require.GreaterOrEqual(t, unknown, 1)
	require.NoError(t, srv.Resume())
}

// ownRedis is a store of one partition on a redis-server of its own,
// which the test may pause.
func ownRedis(t *testing.T) (*testsrv.Redis, *rdb.Store) {
	t.Helper()
	srv, err := testsrv.StartRedis(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Resume(); _ = srv.Kill() })
	c := srv.Client()
	t.Cleanup(func() { _ = c.Close() })
	s, err := rdb.New(c, 1, "")
	require.NoError(t, err)
	require.NoError(t, s.Load(context.Background()))
	return srv, s
}

// pausableStore is ownRedis with an Admitter whose admissions wait a
// minute for a reply (as the gateway's: admission.New's ac).
func pausableStore(t *testing.T) (*testsrv.Redis, *rdb.Store, *admission.Admitter) {
	t.Helper()
	srv, s := ownRedis(t)
	ac := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: time.Minute, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = ac.Close() })
	return srv, s, admission.New(s, ac)
}

// A claim sent to a Redis that answers after the claim's reply time is
// answered ErrOutcomeUnknown; its round trip goes on, and when the reply
// comes its outcome (the script's decision) is handed to Late, recorded,
// and read back as the claim's outcome.
func TestBatcherHandsALateReplyToLate(t *testing.T) {
	srv, s, adm := pausableStore(t)
	seedVoucher(t, s, rdb.Voucher{ID: 6, Stock: 1, PerUserLimit: 1})
	seedVoucher(t, s, rdb.Voucher{ID: 60, Stock: 1, PerUserLimit: 1})
	late := make(chan []admission.LateOutcome, 2)
	b := adm.StartBatcher(admission.BatcherConfig{Workers: 1, MaxBatch: 8, Timeout: 100 * time.Millisecond,
		ReplyTimeout: 200 * time.Millisecond, Late: func(o []admission.LateOutcome) { late <- o }})
	defer b.Close()
	// Warm the admission connection, so the claim below is written at once.
	_, err := b.Admit(context.Background(), admission.Claim{VoucherID: 60, UserID: "warm", Now: t0, Day: d0})
	require.NoError(t, err)

	require.NoError(t, srv.Pause())
	claim := admission.Claim{VoucherID: 6, UserID: "slow", Now: t0, Day: d0}
	_, err = b.Admit(context.Background(), claim)
	require.ErrorIs(t, err, admission.ErrOutcomeUnknown)
	require.NoError(t, srv.Resume())

	var got []admission.LateOutcome
	select {
	case got = <-late:
	case <-time.After(time.Minute):
		t.Fatal("the late reply was never handed to Late")
	}
	require.Len(t, got, 1)
	require.NoError(t, got[0].Err)
	require.Equal(t, claim, got[0].Claim)
	requireStock(t, s, 6, 0) // it was admitted, though its caller was told "unknown"

	ctx := context.Background()
	ref := admission.RefOf(claim)
	_, found, _, err := adm.ClaimOutcome(ctx, ref)
	require.NoError(t, err)
	require.False(t, found)
	require.NoError(t, adm.RecordOutcomes(ctx, got, time.Minute))
	o, found, _, err := adm.ClaimOutcome(ctx, ref)
	require.NoError(t, err)
	require.True(t, found)
	require.True(t, o.Admitted)
	require.Equal(t, got[0].Admission.OrderID, o.Admission.OrderID)

	// A refusal is recorded as its error.
	refused := admission.LateOutcome{Claim: admission.Claim{VoucherID: 6, UserID: "other", Now: t0, Day: d0}, Err: rdb.ErrSoldOut}
	require.NoError(t, adm.RecordOutcomes(ctx, []admission.LateOutcome{refused}, time.Minute))
	o, found, _, err = adm.ClaimOutcome(ctx, admission.RefOf(refused.Claim))
	require.NoError(t, err)
	require.True(t, found)
	require.False(t, o.Admitted)
	require.ErrorIs(t, o.Refusal, rdb.ErrSoldOut)

	// Two claims of one buyer in one millisecond have a record each, by
	// their serials; and the first decision recorded stands.
	twin := func(err error) admission.LateOutcome {
		return admission.LateOutcome{Claim: admission.Claim{VoucherID: 6, UserID: "twin", Now: t0, Day: d0, Serial: admission.NewSerial()}, Err: err}
	}
	first, second := twin(nil), twin(rdb.ErrUserLimit)
	first.Admission = got[0].Admission
	require.NoError(t, adm.RecordOutcomes(ctx, []admission.LateOutcome{first, second}, time.Minute))
	o, _, _, err = adm.ClaimOutcome(ctx, admission.RefOf(first.Claim))
	require.NoError(t, err)
	require.True(t, o.Admitted, "the admission is not hidden by its twin's refusal")
	o, _, _, err = adm.ClaimOutcome(ctx, admission.RefOf(second.Claim))
	require.NoError(t, err)
	require.ErrorIs(t, o.Refusal, rdb.ErrUserLimit)
	o, err = adm.DecideOutcome(ctx, admission.RefOf(first.Claim), admission.Refused(admission.ErrNotSent), time.Minute)
	require.NoError(t, err)
	require.True(t, o.Admitted, "a later decision does not replace the first")
}

// A batcher closed by a deadline while its round trip waits on a frozen
// Redis (the admission connection reads for a minute) returns at the
// deadline, not at the read timeout: the round trip is cut, and its
// claim's outcome is handed to Late as unknown, to be decided by the
// buyer's orders and the claim's horizon.
func TestBatcherClosedByADeadlineCutsItsRoundTrips(t *testing.T) {
	srv, s, adm := pausableStore(t)
	seedVoucher(t, s, rdb.Voucher{ID: 6, Stock: 1, PerUserLimit: 1})
	late := make(chan []admission.LateOutcome, 2)
	b := adm.StartBatcher(admission.BatcherConfig{Workers: 1, MaxBatch: 8, Timeout: 100 * time.Millisecond,
		ReplyTimeout: 200 * time.Millisecond, Late: func(o []admission.LateOutcome) { late <- o }})
	_, err := b.Admit(context.Background(), admission.Claim{VoucherID: 6, UserID: "warm", Now: t0, Day: d0})
	require.NoError(t, err)
	require.NoError(t, srv.Pause())
	_, err = b.Admit(context.Background(), admission.Claim{VoucherID: 6, UserID: "held", Now: t0, Day: d0})
	require.ErrorIs(t, err, admission.ErrOutcomeUnknown)
	start := time.Now()
	b.CloseBy(start.Add(500 * time.Millisecond))
	took := time.Since(start)
	require.Less(t, took, 30*time.Second, "closed by its deadline, not the minute of the connection's read timeout")
	require.GreaterOrEqual(t, took, 500*time.Millisecond, "the round trip had until the deadline")
	select {
	case got := <-late:
		require.Len(t, got, 1)
		require.ErrorIs(t, got[0].Err, admission.ErrOutcomeUnknown)
	default:
		t.Fatal("the cut round trip's claim was not handed to Late")
	}
}

// A claim that waits behind a round trip Redis does not answer is
// answered ErrNotSent at its deadline, not when the round trip ends: the
// dispatcher drops it, however long the round trip in flight takes.
func TestBatcherDropsWhatWaitsBehindAHungRoundTrip(t *testing.T) {
	srv, s, adm := pausableStore(t)
	seedVoucher(t, s, rdb.Voucher{ID: 7, Stock: 5, PerUserLimit: 5})
	b := adm.StartBatcher(admission.BatcherConfig{Workers: 1, MaxBatch: 1, Timeout: 100 * time.Millisecond})
	defer b.Close()
	require.NoError(t, srv.Pause())
	first := make(chan error, 1)
	go func() {
		_, err := b.Admit(context.Background(), admission.Claim{VoucherID: 7, UserID: "sent", Now: t0, Day: d0})
		first <- err
	}()
	require.ErrorIs(t, <-first, admission.ErrOutcomeUnknown)
	// The worker still waits for the first claim's reply (a minute): the
	// second is answered by the dispatcher's timer.
	done := make(chan error, 1)
	go func() {
		_, err := b.Admit(context.Background(), admission.Claim{VoucherID: 7, UserID: "waiting", Now: t0, Day: d0})
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, admission.ErrNotSent)
	case <-time.After(30 * time.Second):
		t.Fatal("a claim waiting behind a hung round trip was not answered at its deadline")
	}
	require.NoError(t, srv.Resume())
	// The first runs when Redis wakes; the second never does.
	wait.For(t, time.Minute, "the first claim to run", func() bool {
		n, _, err := s.RemainingStock(context.Background(), 7)
		return err == nil && n == 4
	})
	_, _ = b.Admit(context.Background(), admission.Claim{VoucherID: 60, UserID: "after", Now: t0, Day: d0}) // a round trip after
	requireStock(t, s, 7, 4)
}

// On a cluster, a master that does not answer (SIGSTOP: a host hung, or a
// master being failed over) holds up only the claims it decides: the
// batcher sends each master's claims in a pipeline of their own.
func TestBatcherKeepsAHungMasterToItsOwnClaims(t *testing.T) {
	if cluster == nil {
		t.Skip("needs -redis-cluster")
	}
	s := newStore(t, 16)
	cc := s.Client().(*redis.ClusterClient)
	ctx := context.Background()
	masterOf := func(v int64) string {
		n, err := cc.MasterForKey(ctx, rdb.StreamKey(s.PartitionOf(v)))
		require.NoError(t, err)
		return n.Options().Addr
	}
	hung, healthy := int64(1), int64(2)
	for masterOf(healthy) == masterOf(hung) {
		healthy++
	}
	seedVoucher(t, s, rdb.Voucher{ID: hung, Stock: 100})
	seedVoucher(t, s, rdb.Voucher{ID: healthy, Stock: 100})
	var node *testsrv.Redis
	for _, n := range cluster.Nodes {
		if n.Addr == masterOf(hung) {
			node = n
		}
	}
	require.NotNil(t, node)

	// One pipeline worker, so the two vouchers' claims share its batches.
	b := testrdb.Admitter(s).NewBatcher(1, 64, 500*time.Millisecond)
	defer b.Close()
	require.NoError(t, node.Pause())
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			require.NoError(t, node.Resume())
		}
	}
	defer resume()
	var healthyDone, hungDone sync.WaitGroup
	errs := make([]error, 20)
	taken := func() uint32 { st := cc.PoolStats(); return st.Hits + st.Misses }
	before := taken()
	for i := range errs {
		v, wg := hung, &hungDone
		if i >= len(errs)/2 {
			v, wg = healthy, &healthyDone
		}
		if i == len(errs)/2 {
			// The hung master's claims first: the one worker's round
			// trip is held by it (it took a connection) before the
			// healthy master's claims arrive.
			require.Eventually(t, func() bool { return taken() > before }, 5*time.Second, time.Millisecond)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, errs[i] = b.Admit(cctx, admission.Claim{VoucherID: v, UserID: fmt.Sprintf("u%d", i), Now: t0, Day: d0})
		}()
	}
	healthyDone.Wait()
	// Resumed as soon as the healthy master's claims are answered, within
	// the cluster's node timeout (2 s): no failover. The hung master's
	// claims then end either way; only the healthy ones are asserted.
	resume()
	hungDone.Wait()
	for i := len(errs) / 2; i < len(errs); i++ {
		require.NoError(t, errs[i], "claim %d of the healthy master's voucher, beside a hung master", i)
	}
}

// While a call is in flight, the claims that arrive wait for it and go
// together in the next one, unless a full call's worth waits, which goes
// at once beside it. Redis's writes are paused (CLIENT PAUSE WRITE) so
// that a call stays in flight; a call held by the pause is a client
// Redis counts as blocked.
func TestBatcherGathersTheClaimsThatArriveDuringACall(t *testing.T) {
	if cluster != nil {
		t.Skip("pauses a single redis-server")
	}
	s := newStore(t, 1)
	ctx := context.Background()
	seedVoucher(t, s, rdb.Voucher{ID: 31, Stock: 1000, PerUserLimit: 1})
	c := s.Client()
	require.NoError(t, c.ConfigResetStat(ctx).Err())
	b := testrdb.Admitter(s).NewBatcher(4, 128, time.Minute)
	defer b.Close()
	require.NoError(t, c.Do(ctx, "CLIENT", "PAUSE", 60000, "WRITE").Err())
	t.Cleanup(func() { c.Do(context.Background(), "CLIENT", "UNPAUSE") })
	blocked := func() int64 {
		info, err := c.Info(ctx, "clients").Result()
		require.NoError(t, err)
		for _, l := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, "blocked_clients:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return -1
	}
	var wg sync.WaitGroup
	var admitted atomic.Int64
	admit := func(user string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.Admit(ctx, admission.Claim{VoucherID: 31, UserID: user, Now: t0, Day: d0})
			if assert.NoError(t, err) {
				admitted.Add(1)
			}
		}()
	}
	admit("first") // nothing in flight: it goes at once
	wait.For(t, 10*time.Second, "the first claim's call in flight", func() bool { return blocked() == 1 })
	for i := range admission.FillClaims {
		admit(fmt.Sprint("u", i))
	}
	wait.For(t, 10*time.Second, "a full call's worth sent beside it", func() bool { return blocked() == 2 })
	require.NoError(t, c.Do(ctx, "CLIENT", "UNPAUSE").Err())
	wg.Wait()
	require.EqualValues(t, 1+admission.FillClaims, admitted.Load())
	stats, err := c.Info(ctx, "commandstats").Result()
	require.NoError(t, err)
	require.Contains(t, stats, "cmdstat_evalsha:calls=2,", "the claims went in two calls: the first alone, the others together")
}
