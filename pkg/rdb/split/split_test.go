package split_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/testclock"
	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/internal/wait"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
	"github.com/flashsale/flashsale/pkg/rdb/internal/keyspace"
	"github.com/flashsale/flashsale/pkg/rdb/split"
)

// keyedClaim is user's claim under idempotency key k.
func keyedClaim(v int64, user, k string) admission.Claim {
	return admission.Claim{VoucherID: v, UserID: user, IdempotencyKey: k, IdempotencyTTL: time.Hour, Now: t0, Day: d0}
}

// t0 is the tests' sale start, from the clock, and d0 its UTC day.
var (
	t0 = testclock.Start()
	d0 = order.Day(t0, time.UTC)
)

// cluster, with -redis-cluster, is the Redis Cluster of three masters
// every test of the package runs against instead of one redis-server:
// make test runs the package both ways.
var cluster *testsrv.Cluster

func TestMain(m *testing.M) { testsrv.MainMaybeOnCluster(m, &cluster) }

// splitErr is a split's error (its times aside).
func splitErr(_ split.Times, err error) error { return err }

// stepNames are the names of the steps of t.
func stepNames(t split.Times) []string {
	out := make([]string, len(t.Steps))
	for i, st := range t.Steps {
		out[i] = st.Name
	}
	return out
}

// A voucher on one bucket, claimed by 2,000 users with distinct keys (three
// each, and each retried), is split while the claims run, a step at a time
// with claims answered between the steps: it sells exactly its stock, no
// user holds more than the day allows (the day hash moved with its users),
// every retry under a key gets its first admission, no sold_out is answered
// while units remain, and on a cluster the new buckets are on every master.
func TestASplitMidSaleKeepsLimitsAndKeysExact(t *testing.T) {
	s := testrdb.NewStore(t, cluster, 16)
	ctx := context.Background()
	const v, stock, users = 21, 1500, 2000
	testrdb.SeedVoucher(t, s, rdb.Voucher{ID: v, Stock: stock, PerUserLimit: 3, PerUserDailyLimit: 2})
	to, err := split.New(s).Target(ctx, v, 1)
	require.NoError(t, err)
	if cluster == nil {
		require.Equal(t, 1, to, "one Redis: a split gains nothing")
		to = 4
	}
	require.Greater(t, to, 1)
	t.Logf("splitting to %d buckets", to)

	// The reaper's store: another process, its own view of the buckets.
	rs, err := rdb.New(s.Client(), 16, "")
	require.NoError(t, err)
	var answered atomic.Int64
	steps := map[string]int64{}
	splitter := split.New(rs).BeforeStep(func(step string) error {
		// Claims are answered between every two steps.
		// Claims run between every two steps: those of users who stay
		// are answered (the moving users' wait for the split).
		from, until := answered.Load(), time.Now().Add(100*time.Millisecond)
		for answered.Load() < from+20 && time.Now().Before(until) {
			time.Sleep(time.Millisecond)
		}
		steps[step] = answered.Load()
		return nil
	})

	type answer struct {
		user, key      string
		a              admission.Admission
		err            error
		sent, received time.Time
	}
	var mu sync.Mutex
	var out []answer
	work := make(chan string)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range work {
				for _, k := range []string{"k1", "k1", "k2", "k3", "k2"} { // each key retried once
					cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					sent := time.Now()
					a, err := testrdb.Admitter(s).Admit(cctx, keyedClaim(v, u, k))
					cancel()
					mu.Lock()
					out = append(out, answer{u, k, a, err, sent, time.Now()})
					mu.Unlock()
					answered.Add(1)
				}
			}
		}()
	}
	splitDone := make(chan error, 1)
	go func() {
		if err := wait.Until(ctx, 30*time.Second, "300 claims answered", func() (bool, string) { return answered.Load() >= 300, "" }); err != nil {
			splitDone <- err
			return
		}
		splitDone <- splitErr(splitter.Split(ctx, v, to))
	}()
	for i := range users {
		work <- fmt.Sprintf("buyer-%d", i)
	}
	close(work)
	wg.Wait()
	require.NoError(t, <-splitDone)
	require.Len(t, steps, len(split.Steps), "every step ran while claims did")
	t.Logf("claims answered before each step: %v", steps)
	require.Less(t, steps[split.Steps[len(split.Steps)-1]], int64(5*users), "the split ended before the claims did")

	orders := map[int64]bool{}
	held := map[string]map[int64]bool{}
	first := map[string]int64{} // user/key -> its order
	var lastAdmitted time.Time
	var soldOut []answer
	for _, r := range out {
		switch {
		case errors.Is(r.err, rdb.ErrSoldOut):
			soldOut = append(soldOut, r)
			continue
		case errors.Is(r.err, rdb.ErrDailyLimit), errors.Is(r.err, rdb.ErrUserLimit):
			continue
		}
		require.NoError(t, r.err, "user %s key %s", r.user, r.key)
		if id, ok := first[r.user+"/"+r.key]; ok {
			require.Equal(t, id, r.a.OrderID, "a retry under %s/%s gets its first admission", r.user, r.key)
			continue
		}
		require.False(t, r.a.Replayed, "a first claim under a key is no replay")
		first[r.user+"/"+r.key] = r.a.OrderID
		require.False(t, orders[r.a.OrderID], "order %d given twice", r.a.OrderID)
		orders[r.a.OrderID] = true
		if held[r.user] == nil {
			held[r.user] = map[int64]bool{}
		}
		held[r.user][r.a.OrderID] = true
		if r.sent.After(lastAdmitted) {
			lastAdmitted = r.sent
		}
	}
	require.Len(t, orders, stock, "exactly the stock sold")
	for u, os := range held {
		require.LessOrEqual(t, len(os), 2, "user %s within the day's limit", u)
		n, err := s.UserCount(ctx, v, u)
		require.NoError(t, err)
		require.EqualValues(t, len(os), n, "user %s counted once, in their bucket", u)
	}
	for _, r := range soldOut {
		require.False(t, r.received.Before(lastAdmitted), "sold_out answered to %s at %v, before a claim sent at %v was admitted", r.user, r.received, lastAdmitted)
	}
	testrdb.RequireStock(t, s, v, 0)
	testrdb.RequireOneEntryEach(t, s, v, orders)

	if cluster != nil {
		cc := s.Client().(*redis.ClusterClient)
		masters := map[string]bool{}
		for b := range to {
			m, err := cc.MasterForKey(ctx, keyspace.BucketOf(16, v, b).Key())
			require.NoError(t, err)
			masters[m.Options().Addr] = true
		}
		require.Len(t, masters, 3, "the buckets are on every master")
	}
}

// A split stopped before each of its steps (as a kill -9 of the reaper
// would stop it) leaves a voucher that admits exactly, and is completed by
// running it again: counts, day counts, keys and releases stay exact.
func TestASplitStoppedAtAnyStepResumes(t *testing.T) {
	s := testrdb.NewStore(t, cluster, 8)
	ctx := context.Background()
	for i, stop := range split.Steps {
		t.Run(stop, func(t *testing.T) {
			v := int64(40 + i)
			const stock = 200
			testrdb.SeedVoucher(t, s, rdb.Voucher{ID: v, Stock: stock, PerUserLimit: 3, PerUserDailyLimit: 2})
			buyers := testrdb.UsersIn(-1, 1, 60)
			admitted := map[string][]admission.Admission{}
			for _, u := range buyers {
				a, err := testrdb.Admitter(s).Admit(ctx, keyedClaim(v, u, "a"))
				require.NoError(t, err)
				admitted[u] = append(admitted[u], a)
			}
			// Every third buyer's order is released (cancelled, unpaid).
			released := map[string]order.Order{}
			for j, u := range buyers {
				if j%3 == 0 {
					o := order.Order{ID: admitted[u][0].OrderID, VoucherID: v, UserID: u, Quantity: 1, Day: d0}
					ok, err := s.Release(ctx, o, time.Now())
					require.NoError(t, err)
					require.True(t, ok)
					released[u] = o
				}
			}

			rs, err := rdb.New(s.Client(), 8, "")
			require.NoError(t, err)
			killed := errors.New("killed")
			reaper := split.New(rs).BeforeStep(func(step string) error {
				if step == stop {
					return killed
				}
				return nil
			})
			times, err := reaper.Split(ctx, v, 4)
			require.ErrorIs(t, err, killed)
			ran := slices.Index(split.Steps, stop) + 1 // the steps begun, the one stopped included
			require.Equal(t, split.Steps[:ran], stepNames(times), "the times of the steps it began")

			// Meanwhile: claims are answered, or wait for the split (a
			// moving user's), never admitted past a limit. A claim whose
			// 50 ms ran out while it was being sent (a busy machine) has
			// an unknown outcome: its key is asked again once the split
			// is done, and answers what it did.
			var unknown []string
			for _, u := range buyers[:20] {
				cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				a, err := testrdb.Admitter(s).Admit(cctx, keyedClaim(v, u, "b"))
				cancel()
				switch {
				case err == nil:
					admitted[u] = append(admitted[u], a)
				case errors.Is(err, admission.ErrOutcomeUnknown):
					unknown = append(unknown, u)
				default:
					require.ErrorIs(t, err, context.DeadlineExceeded, "user %s", u)
				}
			}

			// Another reaper resumes it, and completes it.
			againStore, err := rdb.New(s.Client(), 8, "")
			require.NoError(t, err)
			again := split.New(againStore)
			times, err = again.Split(ctx, v, 4)
			require.NoError(t, err)
			if ran > slices.Index(split.Steps, "switch")+1 { // found switched: its drop again
				require.Equal(t, []string{"drop"}, stepNames(times))
				require.Zero(t, times.Paused)
			} else { // every step, those done a no-op
				require.Equal(t, split.Steps, stepNames(times))
				require.Positive(t, times.Paused)
			}
			require.NoError(t, splitErr(again.Split(ctx, v, 4)), "a split done is done")
			for _, u := range unknown {
				if a, err := testrdb.Admitter(s).Admit(ctx, keyedClaim(v, u, "b")); err == nil {
					admitted[u] = append(admitted[u], a)
				}
			}
			require.Len(t, bucketStocks(t, s, v, 4), 4)

			var sold int64
			for _, u := range buyers {
				// Each key replays its first admission, in the user's bucket now.
				a, err := testrdb.Admitter(s).Admit(ctx, keyedClaim(v, u, "a"))
				require.NoError(t, err)
				require.True(t, a.Replayed)
				require.Equal(t, admitted[u][0].OrderID, a.OrderID, "user %s key a", u)
				// A second release of a released order gives nothing.
				if o, ok := released[u]; ok {
					got, err := againStore.Release(ctx, o, time.Now())
					require.NoError(t, err)
					require.False(t, got, "user %s's order released once", u)
				}
				want := int64(len(admitted[u]))
				if _, ok := released[u]; ok {
					want--
				}
				n, err := s.UserCount(ctx, v, u)
				require.NoError(t, err)
				require.Equal(t, want, n, "user %s", u)
				// The day allows 2: taken units minus released ones.
				for k := 0; ; k++ {
					_, err := testrdb.Admitter(s).Admit(ctx, keyedClaim(v, u, fmt.Sprintf("c%d", k)))
					if errors.Is(err, rdb.ErrDailyLimit) {
						break
					}
					require.NoError(t, err)
					want++
				}
				require.EqualValues(t, 2, want, "user %s: the day's limit, exactly", u)
				sold += want
			}
			testrdb.RequireStock(t, s, v, stock-sold)
		})
	}
}

// While a voucher splits, the releases of the buyers who stay in their
// bucket are made at once, and so are the changes but a new end while the
// old buckets pre-copy (the new buckets take them again before they
// open); a moving buyer's release, a new end, and any change once the old
// buckets are frozen wait (they stay owed, done after), and a release
// routed by the count before the split is routed again to the user's
// bucket after.
func TestASplittingVoucherReleasesAndChangesWhatItCan(t *testing.T) {
	s := testrdb.NewStore(t, cluster, 8)
	ctx := context.Background()
	testrdb.SeedVoucher(t, s, rdb.Voucher{ID: 50, Stock: 10, PerUserLimit: 1})
	movers, stayers := testrdb.UsersIn(1, 2, 2), testrdb.UsersIn(0, 2, 2) // to bucket 1; in bucket 0
	orders := map[string]order.Order{}
	for _, u := range []string{movers[0], stayers[0], stayers[1]} {
		a, err := testrdb.Claim(s, 50, u, t0)
		require.NoError(t, err)
		orders[u] = order.Order{ID: a.OrderID, VoucherID: 50, UserID: u, Quantity: 1, Day: d0}
	}
	released := func(u string) {
		t.Helper()
		ok, err := s.Release(ctx, orders[u], time.Now())
		require.NoError(t, err, "user %s", u)
		require.True(t, ok, "user %s", u)
		n, err := s.UserCount(ctx, 50, u)
		require.NoError(t, err)
		require.Zero(t, n, "user %s", u)
	}
	yes := true
	killed := errors.New("killed")
	stopAt := func(at string) {
		stopped := split.New(s).BeforeStep(func(step string) error {
			if step == at {
				return killed
			}
			return nil
		})
		require.ErrorIs(t, splitErr(stopped.Split(ctx, 50, 2)), killed)
	}

	stopAt("catchup") // pre-copying, the new bucket created
	released(stayers[0])
	_, err := s.Release(ctx, orders[movers[0]], time.Now())
	require.ErrorIs(t, err, rdb.ErrSplitting, "a moving buyer's release waits")
	ok, _, err := s.ApplyChange(ctx, rdb.Change{ID: 9, VoucherID: 50, AddStock: 5, Paused: &yes})
	require.NoError(t, err)
	require.True(t, ok, "a top-up and a pause applied while pre-copying")
	_, _, err = s.ApplyChange(ctx, rdb.Change{ID: 10, VoucherID: 50, EndsAt: t0.Add(time.Hour), ExpireAt: t0.Add(49 * time.Hour)})
	require.ErrorIs(t, err, rdb.ErrSplitting, "a new end waits")

	stopAt("open") // frozen
	released(stayers[1])
	_, err = s.Release(ctx, orders[movers[0]], time.Now())
	require.ErrorIs(t, err, rdb.ErrSplitting)
	_, _, err = s.ApplyChange(ctx, rdb.Change{ID: 11, VoucherID: 50, AddStock: 1})
	require.ErrorIs(t, err, rdb.ErrSplitting, "no change once frozen")

	require.NoError(t, splitErr(split.New(s).Split(ctx, 50, 2)))
	for _, u := range []string{movers[1], stayers[0]} {
		_, err := testrdb.Claim(s, 50, u, t0)
		require.ErrorIs(t, err, rdb.ErrPaused, "user %s: the pause applied while pre-copying holds in both buckets", u)
	}
	ok, _, err = s.ApplyChange(ctx, rdb.Change{ID: 9, VoucherID: 50, AddStock: 5, Paused: &yes})
	require.NoError(t, err)
	require.False(t, ok, "the new bucket knows change 9 applied")
	released(movers[0]) // in the user's bucket now
	for _, id := range []int64{10, 11} {
		c := rdb.Change{ID: id, VoucherID: 50, AddStock: 1}
		if id == 10 {
			c = rdb.Change{ID: 10, VoucherID: 50, EndsAt: t0.Add(time.Hour), ExpireAt: t0.Add(49 * time.Hour)}
		}
		ok, _, err := s.ApplyChange(ctx, c)
		require.NoError(t, err)
		require.True(t, ok, "change %d", id)
	}
	testrdb.RequireStock(t, s, 50, 10-3+3+5+1)
	pending, err := s.UserPending(ctx, 50, movers[0])
	require.NoError(t, err)
	require.Len(t, pending, 1, "the order admitted before the split is listed from its old bucket")
}

// A split's spread leaves the buckets even, whatever the new buckets hold
// when it runs: between the switch and the spread the new buckets are
// dry, and the claims there refill them from the richest.
func TestASplitsSpreadEvensTheBuckets(t *testing.T) {
	s := testrdb.NewStore(t, cluster, 8)
	ctx := context.Background()
	const v = 51
	testrdb.SeedVoucher(t, s, rdb.Voucher{ID: v, Stock: 900, PerUserLimit: 1, Buckets: 2})
	splitter := split.New(s).BeforeStep(func(step string) error {
		if step == "spread" { // switched: a claim in dry bucket 3 takes half of bucket 0's or 1's
			_, err := testrdb.Claim(s, v, testrdb.UsersIn(3, 4, 1)[0], t0)
			return err
		}
		return nil
	})
	require.NoError(t, splitErr(splitter.Split(ctx, v, 4)))
	require.Equal(t, []int64{225, 225, 225, 224}, bucketStocks(t, s, v, 4), "899 units, a quarter each")
}

// ShareEvenly evens a voucher's buckets, and refuses (ErrSplitting) and
// moves nothing while the voucher splits: its new buckets are closed.
func TestShareEvenlyEvensTheBucketsButNotWhileSplitting(t *testing.T) {
	s := testrdb.NewStore(t, cluster, 8)
	ctx := context.Background()
	const v = 53
	testrdb.SeedVoucher(t, s, rdb.Voucher{ID: v, Stock: 100, PerUserLimit: 1, Buckets: 2})
	for _, u := range testrdb.UsersIn(0, 2, 4) { // bucket 0 only: 46 and 50
		_, err := testrdb.Claim(s, v, u, t0)
		require.NoError(t, err)
	}
	require.Equal(t, []int64{46, 50}, bucketStocks(t, s, v, 2))
	require.NoError(t, s.ShareEvenly(ctx, v))
	require.Equal(t, []int64{48, 48}, bucketStocks(t, s, v, 2))

	stopped := errors.New("stopped")
	halfway := split.New(s).BeforeStep(func(step string) error {
		if step == "open" { // frozen, the new buckets closed
			return stopped
		}
		return nil
	})
	require.ErrorIs(t, splitErr(halfway.Split(ctx, v, 4)), stopped)
	require.ErrorIs(t, s.ShareEvenly(ctx, v), rdb.ErrSplitting)
	require.Equal(t, []int64{48, 48}, bucketStocks(t, s, v, 2), "nothing moved")
	require.NoError(t, splitErr(split.New(s).Split(ctx, v, 4)))
	require.Equal(t, []int64{24, 24, 24, 24}, bucketStocks(t, s, v, 4), "the split's spread")
}

// A user who bought before a split and after it has orders indexed in
// two buckets, each where its stream is; a repair (RewriteVoucher) keeps
// both, and the counts of buckets to read them at.
func TestARepairAfterASplitKeepsTheUsersPendingOrders(t *testing.T) {
	s := testrdb.NewStore(t, cluster, 8)
	ctx := context.Background()
	testrdb.SeedVoucher(t, s, rdb.Voucher{ID: 52, Stock: 10, PerUserLimit: 2})
	u := testrdb.UsersIn(1, 2, 1)[0] // moves to bucket 1
	_, err := testrdb.Claim(s, 52, u, t0)
	require.NoError(t, err)
	require.NoError(t, splitErr(split.New(s).Split(ctx, 52, 2)))
	_, err = testrdb.Claim(s, 52, u, t0)
	require.NoError(t, err)
	pending, err := s.UserPending(ctx, 52, u)
	require.NoError(t, err)
	require.Len(t, pending, 2, "before and after the split")

	st, err := s.ReadVoucherState(ctx, 52, nil)
	require.NoError(t, err)
	require.NoError(t, s.RewriteVoucher(ctx, st, nil, nil))
	pending, err = s.UserPending(ctx, 52, u)
	require.NoError(t, err)
	require.Len(t, pending, 2, "both listed after the repair")
	n, err := s.UserCount(ctx, 52, u)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
}

// A failover of the old bucket's master in the middle of a split (an
// operator's CLUSTER FAILOVER to its replica, between the copy and the
// opening of the new buckets): the split completes on the new master, and
// the voucher sells exactly its stock, every user within the limit,
// every key its first order.
func TestASplitThroughAFailoverOfItsMaster(t *testing.T) {
	if cluster != nil {
		t.Skip("starts a cluster with replicas of its own: run in the one-Redis pass")
	}
	c, err := testsrv.StartClusterWithReplicas(t.TempDir(), 3, 1)
	require.NoError(t, err)
	t.Cleanup(c.Kill)
	ctx := context.Background()
	cc := c.Client()
	t.Cleanup(func() { cc.Close() })
	s, err := rdb.New(cc, 8, "")
	require.NoError(t, err)
	require.NoError(t, s.Load(ctx))
	require.NoError(t, s.EnsureGroups(ctx))
	require.NoError(t, s.MarkAllLoaded(ctx))
	const v, stock, limit = 61, 300, 2
	testrdb.SeedVoucher(t, s, rdb.Voucher{ID: v, Stock: stock, PerUserLimit: limit})
	buyers := testrdb.UsersIn(-1, 1, 200)
	first := map[string]int64{}
	held := map[string]int64{}
	for _, u := range buyers[:100] {
		a, err := testrdb.Admitter(s).Admit(ctx, keyedClaim(v, u, "a"))
		require.NoError(t, err)
		first[u], held[u] = a.OrderID, 1
	}
	rs, err := rdb.New(cc, 8, "")
	require.NoError(t, err)
	var old string
	splitter := split.New(rs).BeforeStep(func(step string) error {
		if step != "open" {
			return nil
		}
		fctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		old, err = c.FailoverOf(fctx, s.VoucherKey(v))
		return err
	})
	to, err := splitter.Target(ctx, v, 1)
	require.NoError(t, err)
	require.Greater(t, to, 1)
	require.NoError(t, splitErr(splitter.Split(ctx, v, to)))
	// Every node learns the failover by gossip: a client asking one that
	// has not yet is told the old master.
	wait.For(t, 30*time.Second, "bucket 0's slot failed over", func() bool {
		now, err := c.MasterOf(ctx, s.VoucherKey(v))
		return err == nil && now.Addr != old
	})

	sold := int64(len(first))
	for _, u := range buyers {
		if id, ok := first[u]; ok {
			a, err := testrdb.Admitter(s).Admit(ctx, keyedClaim(v, u, "a"))
			require.NoError(t, err)
			require.Equal(t, id, a.OrderID, "user %s: a retry gets its first order", u)
		}
		for _, k := range []string{"b", "c"} {
			_, err := testrdb.Admitter(s).Admit(ctx, keyedClaim(v, u, k))
			if errors.Is(err, rdb.ErrUserLimit) || errors.Is(err, rdb.ErrSoldOut) {
				continue
			}
			require.NoError(t, err)
			held[u]++
			sold++
		}
	}
	require.EqualValues(t, stock, sold, "exactly the stock")
	testrdb.RequireStock(t, s, v, 0)
	for u, n := range held {
		require.LessOrEqual(t, n, int64(limit))
		got, err := s.UserCount(ctx, v, u)
		require.NoError(t, err)
		require.Equal(t, n, got, "user %s counted once, in their bucket", u)
	}
}

// bucketStocks are the stocks of voucher v's n buckets, moves owed left
// out.
func bucketStocks(t *testing.T, s *rdb.Store, v int64, n int) []int64 {
	t.Helper()
	out := make([]int64, n)
	for b := range n {
		x, err := s.Client().HGet(context.Background(), keyspace.BucketOf(s.Partitions(), v, b).Key(), "stock").Int64()
		require.NoError(t, err, "bucket %d", b)
		out[b] = x
	}
	return out
}
