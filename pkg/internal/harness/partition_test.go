package harness_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/internal/wait"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/reaper"
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
//
// single: one redis-server, durability none; the cut heals after 40 more
// answers (or 10 s). sentinel: the master is cut from everyone (gateway,
// workers, reaper, its replica and the sentinel) with durability replica;
// the cut lasts until the sentinel has promoted the replica, then heals,
// the old master rejoins as a replica, and the gateway admits again: what
// the old master admitted that its replica never acknowledged was never
// answered 202. cluster: the same on a Redis Cluster of three masters
// with a replica each, the voucher's master cut off until the cluster
// has promoted its replica.
func TestAGatewayCutFromRedisMidPipeline(t *testing.T) {
	t.Parallel() // it mostly waits (see TestMain)
	skipWithoutNetns(t)
	for _, mode := range []string{"single", "sentinel", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel() // most of it waits on a failover or a timeout: the modes wait together
			gatewayCut(t, mode)
		})
	}
}

func gatewayCut(t *testing.T, mode string) {
	ctx := context.Background()
	env := []string{"FLASHSALE_CLAIM_TIMEOUT=500ms", "FLASHSALE_USER_RATE=0"}
	o := harness.Options{Dir: t.TempDir(), Workers: 1, Partitions: 2, Reaper: true}
	switch mode {
	case "single":
		o.RedisNetns = true
	case "sentinel":
		o.RedisNetns, o.Sentinel = true, true
		env = append(env, "FLASHSALE_REDIS_DURABILITY=replica")
	case "cluster":
		// Four partitions: p0 and p1 share a master's slots, p2 and p3
		// are on the other two.
		o.Cluster, o.ClusterReplicas, o.ClusterNetns, o.Partitions = true, 1, true, 4
		env = append(env, "FLASHSALE_REDIS_DURABILITY=replica")
	}
	o.Env = env
	s, err := harness.StartStack(ctx, o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	const users, conns = 400, 8
	stock := int64(150)
	if mode != "single" { // left for claims after the heal
		stock = 3000
	}
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "partition", Stock: stock, PerUserLimit: 1})
	require.NoError(t, err)
	// The master cut off: the one in the namespace. On the cluster, a
	// voucher whose partition that node serves.
	oldMaster := ""
	if mode == "cluster" {
		oldMaster = s.Cluster.Nodes[0].Addr
		for {
			m, err := s.Cluster.MasterOf(ctx, rdb.StreamKey(s.RDB.PartitionOf(v)))
			require.NoError(t, err)
			if m.Addr == oldMaster {
				break
			}
			require.Less(t, v, int64(20), "no voucher on the cut-off master")
			v, err = s.CreateVoucher(ctx, harness.VoucherSpec{Name: "partition", Stock: stock, PerUserLimit: 1})
			require.NoError(t, err)
		}
	} else {
		oldMaster = s.Redis.Addr
	}

	client := harness.NewClient(s.URL, conns)
	var h harness.History
	claim := func(user string) harness.Attempt { return s.ClaimRecorded(ctx, client, &h, v, user) }

	// The cut starts after 100 answers; claims go on until it has healed
	// (and, with a replica, the gateway admits again).
	var answered, admitted atomic.Int64
	cut, done := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { t.Logf("answers: %s", h.Summary()) })
	go func() {
		defer close(done)
		testenv.Eventually(t, 60*time.Second, "100 answers", func() bool { return answered.Load() >= 100 })
		require.NoError(t, s.RedisNet.Cut())
		defer func() { require.NoError(t, s.RedisNet.Heal()) }()
		close(cut)
		switch mode {
		case "single":
			// The cut lasts while 40 claims are answered, or 10 s at
			// most: either is a partition the claims met.
			at := answered.Load()
			_ = wait.Until(ctx, 10*time.Second, "40 claims answered", func() (bool, string) { return answered.Load() >= at+40, "" })
			return
		case "sentinel":
			sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinel.Addr})
			defer sc.Close()
			testenv.Eventually(t, 60*time.Second, "the sentinel promotes the replica", func() bool {
				m, err := sc.GetMasterAddrByName(ctx, harness.SentinelMaster).Result()
				return err == nil && m[0]+":"+m[1] != oldMaster
			})
		case "cluster":
			wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			require.NoError(t, s.Cluster.WaitServed(wctx, rdb.StreamKey(s.RDB.PartitionOf(v)), oldMaster))
		}
		// The promoted replica has no replica of its own while the cut
		// lasts: with durability replica it admits nothing until the old
		// master has rejoined it.
		require.NoError(t, s.RedisNet.Heal())
		at := admitted.Load()
		testenv.Eventually(t, 60*time.Second, "a 202 from the promoted replica", func() bool { return admitted.Load() > at })
	}()
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Until the heal, and at least users claims.
			for i := next.Add(1); ; i = next.Add(1) {
				if i > users {
					select {
					case <-done:
						return
					default:
					}
				}
				switch a := claim(fmt.Sprintf("u%d", i)); {
				case a.Status == 202:
					admitted.Add(1)
				case a.Unknown(), a.Status == 503: // paces the clients while Redis is away
					time.Sleep(10 * time.Millisecond)
				}
				answered.Add(1)
			}
		}()
	}
	wg.Wait()
	<-done
	select {
	case <-cut:
	default:
		t.Fatal("the sale ended before the cut")
	}
	if mode != "single" {
		testenv.Eventually(t, 60*time.Second, "the old master rejoins as a replica", func() bool {
			c := redis.NewClient(&redis.Options{Addr: oldMaster})
			defer c.Close()
			info, err := c.Info(ctx, "replication").Result()
			return err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up")
		})
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
	t.Logf("%d users, %d answers of unknown outcome during the cut, all decided on retry; answers: %s", next.Load()-conns, unknown, h.Summary())
}

// A transaction whose COMMIT reaches MySQL and whose answer never comes
// back: mariadbd runs in a network namespace of its own, and from the
// first packet carrying "COMMIT" on, every packet it sends back to the
// stack is dropped (iptables' string and recent matches), so that COMMIT
// is done and its sender waits for an answer that never comes, until its
// read times out (MySQLIOTimeout). Then the cut heals.
//
// First a worker's batch in a live sale: the batch is retried (its entries
// were not acknowledged) and written once; the history checker holds
// every 202 to exactly one order. Then the reaper's expiry: with the
// worker stopped, the reaper's transaction cancelling orders left unpaid
// commits unheard; it is retried, and every order is cancelled once, its
// unit given back to Redis once.
func TestACommitWhoseAnswerNeverComes(t *testing.T) {
	t.Parallel() // it mostly waits (see TestMain)
	skipWithoutNetns(t)
	ctx := context.Background()
	s, err := harness.StartStack(ctx, harness.Options{Dir: t.TempDir(), Workers: 1, Partitions: 2, Reaper: true, MySQLNetns: true,
		MySQLIOTimeout: 1500 * time.Millisecond,
		Env:            []string{"FLASHSALE_WORKER_BATCH_SIZE=20", "FLASHSALE_USER_RATE=0", "FLASHSALE_REAPER_INTERVAL=300ms"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	// armCut cuts after the COMMIT of a transaction whose connection
	// carried text (a worker's batch insert, the expirer's cancellation,
	// the draw's winners); awaitCut holds the cut until the process that
	// sent it has given up on the answer (sample, one of its failure
	// counters, has grown past before, read while no such commit could
	// be sent), and heals. The cut is armed before the process can send
	// the commit: armed beside it, on a loaded machine, it came after the
	// draw's COMMIT and waited for one that never came.
	// (Called from a goroutine, a failure ends that goroutine and fails t.)
	armCut := func(t *testing.T, text string) {
		t.Helper()
		require.NoError(t, s.MySQLNet.CutAnswersAfter(testsrv.MySQLCommit, text))
	}
	awaitCut := func(t *testing.T, p *harness.Proc, sample string, before float64) {
		t.Helper()
		if err := wait.Until(ctx, time.Minute, "a COMMIT sent on a connection of the text", func() (bool, string) {
			seen, err := s.MySQLNet.Seen()
			return seen, fmt.Sprint(err)
		}); err != nil {
			t.Fatalf("%v; the rules and their counters:\n%s", err, s.MySQLNet.Rules())
		}
		testenv.Eventually(t, 60*time.Second, "its sender gave up on the answer", func() bool { return metric(t, p.OpsURL, sample) > before })
		require.NoError(t, s.MySQLNet.Heal())
	}

	t.Run("worker", func(t *testing.T) {
		const stock, users = 400, 600
		v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "commit", Stock: stock, PerUserLimit: 1})
		require.NoError(t, err)
		client := harness.NewClient(s.URL, 4)
		var h harness.History
		var answered atomic.Int64
		done := make(chan struct{})
		go func() {
			defer close(done)
			testenv.Eventually(t, 60*time.Second, "100 answers", func() bool { return answered.Load() >= 100 })
			// Only the worker commits now: the COMMIT caught is its.
			require.NoError(t, s.Reaper.Signal(syscall.SIGSTOP))
			defer func() { require.NoError(t, s.Reaper.Signal(syscall.SIGCONT)) }()
			before := metric(t, s.Workers[0].OpsURL, "flashsale_worker_batch_retries_total")
			armCut(t, "INSERT INTO orders (")
			awaitCut(t, s.Workers[0], "flashsale_worker_batch_retries_total", before)
		}()
		next := atomic.Int64{}
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1); i <= users; i = next.Add(1) {
					s.ClaimRecorded(ctx, client, &h, v, fmt.Sprintf("w%d", i))
					answered.Add(1)
					time.Sleep(5 * time.Millisecond) // the sale outlasts the cut
				}
			}()
		}
		wg.Wait()
		<-done
		testenv.Eventually(t, 90*time.Second, "drained", func() bool { ok, _ := s.Drained(ctx); return ok })
		bad := s.CheckHistory(ctx, &h, v, stock)
		require.Empty(t, bad, "violations:\n%s", strings.Join(bad, "\n"))
		// The power: a batch MySQL had committed unheard came back, and
		// nothing of it was written again.
		require.Positive(t, metric(t, s.Workers[0].OpsURL, `flashsale_worker_orders_total{outcome="redelivered"}`),
			"no batch committed unheard was redelivered: the cut caught no worker's COMMIT")
	})

	t.Run("reaper expiry", func(t *testing.T) {
		const n = 30
		v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "expiry", Stock: n, PerUserLimit: 1, PaymentTimeoutSeconds: 2})
		require.NoError(t, err)
		client := harness.NewClient(s.URL, 4)
		// The reaper waits until the orders are persisted and the cut
		// armed: its expirer cancels an order two seconds old, and on a
		// loaded machine it cancelled the first before the last was
		// persisted.
		before := metric(t, s.Reaper.OpsURL, expirerFailed)
		require.NoError(t, s.Reaper.Signal(syscall.SIGSTOP))
		stopped := true
		defer func() {
			if stopped {
				_ = s.Reaper.Signal(syscall.SIGCONT)
			}
		}()
		for i := range n {
			status, err := client.Do(ctx, "POST", "/v1/vouchers/"+itoa(v)+"/orders", s.Token(fmt.Sprintf("e%d", i)), nil, nil)
			require.NoError(t, err)
			require.Equal(t, 202, status)
		}
		testenv.Eventually(t, 60*time.Second, "persisted", func() bool {
			c, err := s.DB.OrderCounts(ctx, v)
			return err == nil && c[order.StatusCreated] == n
		})
		// Only the reaper commits now; its expirer cancels the orders once
		// they are two seconds old.
		require.NoError(t, s.Workers[0].Signal(syscall.SIGSTOP))
		defer func() { _ = s.Workers[0].Signal(syscall.SIGCONT) }()
		armCut(t, "UPDATE orders SET status") // the expirer's cancellation
		require.NoError(t, s.Reaper.Signal(syscall.SIGCONT))
		stopped = false
		awaitCut(t, s.Reaper, expirerFailed, before)
		testenv.Eventually(t, 60*time.Second, "every order cancelled", func() bool {
			c, err := s.DB.OrderCounts(ctx, v)
			return err == nil && c[order.StatusCancelled] == n
		})
		testenv.Eventually(t, 60*time.Second, "every unit back in Redis, once", func() bool {
			left, _, err := s.RDB.RemainingStock(ctx, v)
			return err == nil && left == n
		})
		left, _, err := s.RDB.RemainingStock(ctx, v)
		require.NoError(t, err)
		require.EqualValues(t, n, left, "a unit given back twice")

		checks, err := reaper.Reconcile(ctx, s.RDB, s.DB, time.Now(), false)
		require.NoError(t, err)
		for _, c := range checks {
			require.Empty(t, c.Differences, "voucher %d", c.VoucherID)
		}
	})

	t.Run("reaper draw", func(t *testing.T) {
		// The cut waits for the draw's COMMIT (its transaction marks the
		// winners drawn) while the sale runs, is drawn and is verified.
		before := metric(t, s.Reaper.OpsURL, drawerFailed)
		armCut(t, "drawn = 1")
		cut := make(chan struct{})
		go func() {
			defer close(cut)
			awaitCut(t, s.Reaper, drawerFailed, before)
		}()
		rep, err := s.RunDraw(ctx, harness.DrawConfig{Stock: 10, Users: 60, Requests: 60, Concurrency: 4, Window: 4 * time.Second, Seed: 7})
		require.NoError(t, err)
		<-cut
		require.Zero(t, rep.Missing+rep.Unexpected+rep.UsersTwice, "%+v", rep)
		require.Equal(t, rep.WinnersWanted, rep.Winners, "%+v", rep)
		require.Zero(t, rep.Undecided, "%+v", rep)
		require.True(t, rep.CommitmentHolds, "%+v", rep)
		require.Zero(t, rep.VerifyExit, rep.Verify)

	})
}

// The reaper's passes that failed, by service.
const (
	expirerFailed = `flashsale_reaper_passes_total{outcome="error",service="expirer"}`
	drawerFailed  = `flashsale_reaper_passes_total{outcome="error",service="drawer"}`
)

// metric reads one sample of a process's /metrics (name with its labels,
// as exposed), 0 when absent.
func metric(t *testing.T, opsURL, sample string) float64 {
	t.Helper()
	_, body := get(t, opsURL+"/metrics")
	for _, l := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(l, sample+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			require.NoError(t, err)
			return v
		}
	}
	return 0
}

// Split brain: the Sentinel master is cut off from its sentinel and its
// replica, while one gateway (in the master's namespace, with MySQL, and
// given the master's address) still reaches it and the stack's gateway
// follows the sentinel to the replica it promotes. Then the partition heals
// and the old master rejoins as a replica of the new one, dropping what
// it took alone.
//
// With FLASHSALE_REDIS_DURABILITY=none the cut-off gateway answers 202s
// that are lost with the old master's data (the test requires some: its
// power). With replica, a 202 needs a replica's acknowledgement the
// cut-off master cannot get: that gateway answers 503, and no 202 is lost.
func TestSplitBrainOfASentinelMaster(t *testing.T) {
	t.Parallel() // it mostly waits (see TestMain)
	skipWithoutNetns(t)
	for _, mode := range []string{"none", "replica"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel() // most of it waits on the sentinel: the two modes wait together
			splitBrain(t, mode)
		})
	}
}

func splitBrain(t *testing.T, mode string) {
	ctx := context.Background()
	s, err := harness.StartStack(ctx, harness.Options{Dir: t.TempDir(), Workers: 1, Partitions: 2, Reaper: true, Sentinel: true,
		RedisNetns: true, MySQLNetns: true, SharedNetns: true,
		Env: []string{"FLASHSALE_REDIS_DURABILITY=" + mode, "FLASHSALE_CLAIM_TIMEOUT=1s", "FLASHSALE_USER_RATE=0"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	const stock = 2000
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "split", Stock: stock, PerUserLimit: 1})
	require.NoError(t, err)
	// The cut-off gateway talks to the master by its address, no sentinel.
	g1, g1URL, err := s.StartGatewayIn(s.RedisNet, "FLASHSALE_REDIS_ADDR="+s.Redis.Addr, "FLASHSALE_REDIS_SENTINEL_MASTER=")
	require.NoError(t, err)
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinel.Addr})
	defer sc.Close()

	var h harness.History
	claim := func(url, user string) harness.Attempt {
		return s.ClaimRecorded(ctx, harness.NewClient(url, 1), &h, v, user)
	}
	for i := range 5 { // both sides admit before the partition
		require.Equal(t, 202, claim(s.URL, fmt.Sprintf("before-a%d", i)).Status)
		require.Equal(t, 202, claim(g1URL, fmt.Sprintf("before-b%d", i)).Status)
	}

	_, portStr, _ := strings.Cut(strings.TrimPrefix(g1URL, "http://"), ":")
	port, _ := strconv.Atoi(portStr)
	require.NoError(t, s.RedisNet.CutExceptPort(port))
	oldMaster := s.Redis.Addr
	testenv.Eventually(t, 60*time.Second, "the sentinel promotes the replica", func() bool {
		m, err := sc.GetMasterAddrByName(ctx, harness.SentinelMaster).Result()
		return err == nil && m[0]+":"+m[1] != oldMaster
	})
	// Two masters now: each gateway claims for a while on its side.
	cutOff := map[string]harness.Attempt{} // the cut-off gateway's answers
	for i := range 40 {
		u1, u2 := fmt.Sprintf("cut-%d", i), fmt.Sprintf("main-%d", i)
		cutOff[u1] = claim(g1URL, u1)
		claim(s.URL, u2)
	}
	require.NoError(t, s.RedisNet.Heal())
	testenv.Eventually(t, 60*time.Second, "the old master rejoins as a replica", func() bool {
		info, err := redis.NewClient(&redis.Options{Addr: oldMaster}).Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up")
	})
	require.NoError(t, g1.Stop(20*time.Second))

	// Claims of unknown outcome are retried, with their keys, through the
	// stack's gateway, which follows the sentinel.
	testenv.Eventually(t, 90*time.Second, "every key decided", func() bool {
		undecided := 0
		for _, a := range h.Last() {
			if a.Unknown() {
				undecided++
				claim(s.URL, a.User)
			}
		}
		return undecided == 0
	})
	testenv.Eventually(t, 90*time.Second, "drained", func() bool { ok, _ := s.Drained(ctx); return ok })
	lost, answered := 0, 0
	for _, a := range cutOff {
		if a.Status != 202 {
			continue
		}
		answered++
		n, err := strconv.ParseInt(a.OrderID, 10, 64)
		require.NoError(t, err)
		// Its id may have been given again on the other side: the order
		// must be its user's.
		if o, err := s.DB.Order(ctx, n); err != nil || o.UserID != a.User {
			lost++
		}
	}
	t.Logf("%s: the cut-off gateway answered %d 202s, %d of them lost", mode, answered, lost)
	if mode == "none" {
		require.Positive(t, lost, "with none, the cut-off master's 202s are lost: the test has no power if none is")
		return
	}
	for _, a := range cutOff {
		require.True(t, a.Status == 503 || a.Status == 0, "with replica, the cut-off gateway answers 503 (or nothing): %s", a)
	}
	bad := s.CheckHistory(ctx, &h, v, stock)
	require.Empty(t, bad, "violations:\n%s", strings.Join(bad, "\n"))
}
