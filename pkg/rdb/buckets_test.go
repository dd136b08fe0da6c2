package rdb_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
)

func usersIn(b, buckets, n int) []string { return testrdb.UsersIn(b, buckets, n) }

type result struct {
	user string
	a    admission.Admission
	err  error
}

// claimAll has every user claim tries times, all at once, and returns
// every answer.
func claimAll(t *testing.T, s *rdb.Store, v int64, users []string, tries int) []result {
	t.Helper()
	var mu sync.Mutex
	var out []result
	var wg sync.WaitGroup
	for _, u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range tries {
				a, err := claim(s, v, u, t0)
				mu.Lock()
				out = append(out, result{u, a, err})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// checkSale checks a finished sale of stock units with per-user limit
// limit: exactly the stock admitted, none over the limit, order ids unique,
// every order in a stream, and Redis sold out.
func checkSale(t *testing.T, s *rdb.Store, v, stock, limit int64, res []result) {
	t.Helper()
	ids := map[int64]bool{}
	perUser := map[string]int64{}
	for _, r := range res {
		if r.err != nil {
			require.ErrorIs(t, r.err, rdb.ErrSoldOut, "only sold out or the user's limit may refuse")
			continue
		}
		require.False(t, ids[r.a.OrderID], "order id %d given twice", r.a.OrderID)
		ids[r.a.OrderID] = true
		perUser[r.user]++
		require.LessOrEqual(t, perUser[r.user], limit, "user %s over the limit", r.user)
	}
	require.EqualValues(t, stock, len(ids), "admitted exactly the stock")
	requireStock(t, s, v, 0)
	for u, n := range perUser {
		got, err := s.UserCount(context.Background(), v, u)
		require.NoError(t, err)
		require.Equal(t, n, got, "Redis counts user %s in its bucket", u)
	}
	requireOneEntryEach(t, s, v, ids)
}

// requireOneEntryEach checks that the streams hold one order of voucher v
// for each admitted order in ids, and no other: no 202 without its order.
func requireOneEntryEach(t *testing.T, s *rdb.Store, v int64, ids map[int64]bool) {
	t.Helper()
	testrdb.RequireOneEntryEach(t, s, v, ids)
}

// limitOrSoldOut maps the user-limit rejection to nil for checkSale: a
// user over the limit is refused, and that is the point.
func limitOrSoldOut(res []result) []result {
	out := res[:0]
	for _, r := range res {
		if r.err == rdb.ErrUserLimit {
			continue
		}
		out = append(out, r)
	}
	return out
}

func TestHotVoucherSellsExactlyItsStockOverBuckets(t *testing.T) {
	s := newStore(t, 8)
	const stock, limit = 600, 2
	seedVoucher(t, s, rdb.Voucher{ID: 5, Stock: stock, PerUserLimit: limit, Buckets: 4})
	stocks, err := s.BucketStocks(context.Background(), 5, 4)
	require.NoError(t, err)
	require.Equal(t, []int64{150, 150, 150, 150}, stocks)

	// 400 users asking for 3 each (limit 2): 1,200 units wanted, 600 there.
	res := claimAll(t, s, 5, usersIn(-1, 4, 400), 3)
	var limited int
	for _, r := range res {
		if r.err == rdb.ErrUserLimit {
			limited++
		}
	}
	require.Positive(t, limited, "the per-user limit refused claims")
	checkSale(t, s, 5, stock, limit, limitOrSoldOut(res))
}

// All the buyers decide their claims in one bucket: the units of the three
// others move to it, and every unit is sold before anyone is told sold_out.
func TestHotVoucherStrandsNoStockInOtherBuckets(t *testing.T) {
	s := newStore(t, 8)
	const stock = 400
	seedVoucher(t, s, rdb.Voucher{ID: 6, Stock: stock, PerUserLimit: 1, Buckets: 4})
	users := usersIn(2, 4, 500)

	// One at a time first: a sold_out must come only with nothing left.
	for i, u := range users[:stock] {
		_, err := claim(s, 6, u, t0)
		require.NoError(t, err, "claim %d of %d", i+1, stock)
	}
	_, err := claim(s, 6, users[stock], t0)
	require.ErrorIs(t, err, rdb.ErrSoldOut)
	requireStock(t, s, 6, 0)

	// Then at once, with a fresh voucher.
	seedVoucher(t, s, rdb.Voucher{ID: 14, Stock: stock, PerUserLimit: 1, Buckets: 4})
	res := claimAll(t, s, 14, users, 1)
	checkSale(t, s, 14, stock, 1, res)
}

// Quantities larger than any one bucket holds are gathered from several.
func TestHotVoucherGathersAQuantityFromSeveralBuckets(t *testing.T) {
	s := newStore(t, 4)
	seedVoucher(t, s, rdb.Voucher{ID: 8, Stock: 12, PerUserLimit: 10, Buckets: 4}) // 3 in each
	a, err := testrdb.Admitter(s).Admit(context.Background(), admission.Claim{VoucherID: 8, UserID: "big", Now: t0, Day: order.Day(t0, time.UTC), Quantity: 10})
	require.NoError(t, err)
	require.NotZero(t, a.OrderID)
	requireStock(t, s, 8, 2)
	_, err = testrdb.Admitter(s).Admit(context.Background(), admission.Claim{VoucherID: 8, UserID: "other", Now: t0, Day: order.Day(t0, time.UTC), Quantity: 3})
	require.ErrorIs(t, err, rdb.ErrSoldOut, "3 asked, 2 left in all")
	_, err = testrdb.Admitter(s).Admit(context.Background(), admission.Claim{VoucherID: 8, UserID: "other", Now: t0, Day: order.Day(t0, time.UTC), Quantity: 2})
	require.NoError(t, err)
	requireStock(t, s, 8, 0)
}

// A mover that crashed after taking units, or after giving them but before
// forgetting the move, loses and doubles nothing.
func TestHotVoucherMoveLeftHalfWayLosesNothing(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, 4)
	seedVoucher(t, s, rdb.Voucher{ID: 9, Stock: 40, PerUserLimit: 1, Buckets: 2}) // 20 and 20

	// Taken from bucket 1, never given to bucket 0: still counted.
	n, err := s.TakeOnly(ctx, 9, 1, 0, 15, "crashed-1")
	require.NoError(t, err)
	require.EqualValues(t, 15, n)
	requireStock(t, s, 9, 40)
	// Taken and given, not forgotten at the source: counted once.
	_, err = s.TakeOnly(ctx, 9, 1, 0, 5, "crashed-2")
	require.NoError(t, err)
	require.NoError(t, s.GiveOnly(ctx, 9, 0, 5, "crashed-2"))
	requireStock(t, s, 9, 40)
	stocks, err := s.BucketStocks(ctx, 9, 2)
	require.NoError(t, err)
	require.Equal(t, []int64{25, 0}, stocks)

	// Buyers of bucket 1 find it dry: the claim gives the move owed and
	// takes from bucket 0; every unit is sold.
	res := claimAll(t, s, 9, usersIn(1, 2, 60), 1)
	checkSale(t, s, 9, 40, 1, res)

	// The reaper's pass finds nothing left to give, twice.
	for range 2 {
		given, err := s.FinishMoves(ctx, 9)
		require.NoError(t, err)
		require.Zero(t, given)
	}
}

func TestHotVoucherFinishMovesGivesOnce(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, 4)
	seedVoucher(t, s, rdb.Voucher{ID: 10, Stock: 10, PerUserLimit: 1, Buckets: 2})
	_, err := s.TakeOnly(ctx, 10, 0, 1, 5, "m1")
	require.NoError(t, err)
	given, err := s.FinishMoves(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 1, given)
	stocks, err := s.BucketStocks(ctx, 10, 2)
	require.NoError(t, err)
	require.Equal(t, []int64{0, 10}, stocks)
	given, err = s.FinishMoves(ctx, 10)
	require.NoError(t, err)
	require.Zero(t, given)
	requireStock(t, s, 10, 10)
}

// Releases, pauses, changes and a rewrite reach every bucket they should.
func TestHotVoucherOperations(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, 8)
	end := t0.Add(time.Hour)
	seedVoucher(t, s, rdb.Voucher{ID: 11, Stock: 8, PerUserLimit: 1, Buckets: 4, EndsAt: end, ExpireAt: end.Add(rdb.KeysOutliveSale)})
	users := usersIn(3, 4, 3)
	a, err := claim(s, 11, users[0], t0)
	require.NoError(t, err)
	p, _, _ := order.EntryOf(a.OrderID)
	require.Equal(t, (s.PartitionOf(11)+3)%8, p, "the order is admitted in its bucket's partition")

	// A release gives the unit back to the user's bucket, once; the user
	// may claim again.
	o := order.Order{ID: a.OrderID, VoucherID: 11, UserID: users[0], Day: order.Day(t0, time.UTC), Quantity: 1}
	for i, want := range []bool{true, false} {
		ok, err := s.Release(ctx, o, t0)
		require.NoError(t, err)
		require.Equal(t, want, ok, "release %d", i+1)
	}
	requireStock(t, s, 11, 8)
	n, err := s.UserCount(ctx, 11, users[0])
	require.NoError(t, err)
	require.Zero(t, n)

	// Paused in every bucket.
	yes, no := true, false
	_, found, err := s.ApplyChange(ctx, rdb.Change{ID: 100, VoucherID: 11, Paused: &yes})
	require.NoError(t, err)
	require.True(t, found)
	for _, u := range usersIn(-1, 4, 8) {
		_, err := claim(s, 11, u, t0)
		require.ErrorIs(t, err, rdb.ErrPaused, "user %s (bucket %d)", u, rdb.UserBucket(u, 4))
	}
	_, _, err = s.ApplyChange(ctx, rdb.Change{ID: 101, VoucherID: 11, Paused: &no})
	require.NoError(t, err)

	// A top-up and a new end, applied once (twice asked).
	newEnd := end.Add(time.Hour)
	for range 2 {
		_, _, err := s.ApplyChange(ctx, rdb.Change{ID: 1, VoucherID: 11, AddStock: 4, EndsAt: newEnd, ExpireAt: newEnd.Add(rdb.KeysOutliveSale)})
		require.NoError(t, err)
	}
	requireStock(t, s, 11, 12)
	for _, u := range usersIn(-1, 4, 8) {
		_, err := claim(s, 11, u, end.Add(time.Minute))
		require.NoError(t, err, "the new end holds in the bucket of %s", u)
	}
	requireStock(t, s, 11, 4)

	// Read and rewritten whole: each user's count lands in its bucket.
	st, err := s.ReadVoucherState(ctx, 11, nil)
	require.NoError(t, err)
	require.Equal(t, 4, st.Voucher.Buckets)
	require.Len(t, st.Users, 8)
	st.Voucher.Stock = 4
	require.NoError(t, s.RewriteVoucher(ctx, st, []int64{a.OrderID}, []int64{1}))
	again, err := s.ReadVoucherState(ctx, 11, nil)
	require.NoError(t, err)
	require.Equal(t, st.Users, again.Users)
	require.EqualValues(t, 4, again.Voucher.Stock)
	_, err = s.Release(ctx, o, t0)
	require.ErrorIs(t, err, rdb.ErrStaleRelease, "a caller that knew it owed before the rewrite reads MySQL again")
	ok, err := s.Release(ctx, o, time.Now())
	require.NoError(t, err)
	require.False(t, ok, "a release done before the rewrite is not done again")
	for _, u := range usersIn(-1, 4, 8) {
		_, err := claim(s, 11, u, end.Add(time.Minute))
		require.ErrorIs(t, err, rdb.ErrUserLimit, "user %s keeps its count after the rewrite", u)
	}
}

// A gateway that has not seen the voucher routes by one bucket; the script
// tells it the right number, and the claim runs in the user's bucket.
func TestClaimRoutedByTheWrongNumberOfBucketsIsRoutedAgain(t *testing.T) {
	s := newStore(t, 8)
	seedVoucher(t, s, rdb.Voucher{ID: 12, Stock: 8, PerUserLimit: 1, Buckets: 4})
	fresh, err := rdb.New(s.Client(), 8, "")
	require.NoError(t, err)
	u := usersIn(2, 4, 1)[0]
	a, err := claim(fresh, 12, u, t0)
	require.NoError(t, err)
	p, _, _ := order.EntryOf(a.OrderID)
	require.Equal(t, (s.PartitionOf(12)+2)%8, p)
}

// On a cluster, a hot voucher's buckets are on more than one master.
func TestHotVoucherBucketsSpreadOverMasters(t *testing.T) {
	if cluster == nil {
		t.Skip("needs -redis-cluster")
	}
	s := newStore(t, 16)
	seedVoucher(t, s, rdb.Voucher{ID: 13, Stock: 30, Buckets: 3})
	cc := s.Client().(*redis.ClusterClient)
	masters := map[string]bool{}
	for _, k := range s.BucketKeys(13, 3) {
		n, err := cc.MasterForKey(context.Background(), k)
		require.NoError(t, err)
		masters[n.Options().Addr] = true
	}
	require.GreaterOrEqual(t, len(masters), 2, "the buckets' slots are on %v", masters)

	// MastersOf (the detector's per-master figures) names them as the
	// cluster's own slot table does.
	named, err := s.MastersOf(context.Background(), []int64{13}, []int{3})
	require.NoError(t, err)
	slots, err := cc.ClusterSlots(context.Background()).Result()
	require.NoError(t, err)
	for b, k := range s.BucketKeys(13, 3) {
		slot, err := cc.ClusterKeySlot(context.Background(), k).Result()
		require.NoError(t, err)
		owner := ""
		for _, r := range slots {
			if int64(r.Start) <= slot && slot <= int64(r.End) {
				owner = r.Nodes[0].Addr
			}
		}
		require.Equal(t, owner, named[0][b], "bucket %d (slot %d)", b, slot)
	}
}

// A bucket's level falls by its admissions alone: not by a refusal, not
// by units moved to another bucket (taken or given, a move left half way
// included), so the fall between two readings is what the bucket
// admitted.
func TestABucketsLevelFallsByItsAdmissionsAlone(t *testing.T) {
	s := newStore(t, 8)
	ctx := context.Background()
	const v, buckets = 7, 4
	seedVoucher(t, s, rdb.Voucher{ID: v, Stock: 1000, PerUserLimit: 1, Buckets: buckets})
	read := func() []int64 {
		levels, err := s.Levels(ctx, []int64{v, 99}, []int{buckets, 1})
		require.NoError(t, err)
		require.Equal(t, []int64{rdb.NoLevel}, levels[1], "a voucher Redis does not hold")
		return levels[0]
	}
	before := read()
	require.Equal(t, []int64{250, 250, 250, 250}, before)
	users := usersIn(-1, buckets, 60)
	for _, u := range users {
		_, err := claim(s, v, u, t0)
		require.NoError(t, err)
	}
	_, err := claim(s, v, users[0], t0)
	require.ErrorIs(t, err, rdb.ErrUserLimit, "a refusal")
	// A move taken and given, and one taken only (its mover crashed).
	n, err := s.TakeOnly(ctx, v, 1, 2, 40, "m1")
	require.NoError(t, err)
	require.EqualValues(t, 40, n)
	require.NoError(t, s.GiveOnly(ctx, v, 2, 40, "m1"))
	_, err = s.TakeOnly(ctx, v, 3, 0, 10, "m2")
	require.NoError(t, err)
	after := read()
	for b := range buckets {
		var admitted int64
		for _, u := range users {
			if rdb.UserBucket(u, buckets) == b {
				admitted++
			}
		}
		require.Equal(t, admitted, before[b]-after[b], "bucket %d", b)
	}
	none, err := s.Levels(ctx, nil, nil)
	require.NoError(t, err)
	require.Empty(t, none)
}

// The sweep forgets the ids of the moves given before its cutoff: it
// gives the moves still owed first, and afterwards a caller still holding
// a forgotten move is answered "given", and a take of an id made before
// the cutoff moves nothing: no unit is made or lost.
func TestFinishedMovesAreForgottenAndAStaleOneIsRefused(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, 4)
	const v = 12
	seedVoucher(t, s, rdb.Voucher{ID: v, Stock: 40, PerUserLimit: 1, Buckets: 2}) // 20 and 20
	now := time.Now()
	old := func(name string) string { return fmt.Sprintf("%d.%s", now.Add(-time.Hour).UnixMilli(), name) }
	recent := fmt.Sprintf("%d.c", now.UnixMilli())

	_, err := s.TakeOnly(ctx, v, 1, 0, 5, old("a")) // given, not forgotten at its source (a crash between)
	require.NoError(t, err)
	require.NoError(t, s.GiveOnly(ctx, v, 0, 5, old("a")))
	_, err = s.TakeOnly(ctx, v, 1, 0, 3, old("b")) // taken, never given
	require.NoError(t, err)
	_, err = s.TakeOnly(ctx, v, 0, 1, 2, recent)
	require.NoError(t, err)
	require.NoError(t, s.GiveOnly(ctx, v, 1, 2, recent))
	requireStock(t, s, v, 40)

	forgot, err := s.ForgetMoves(ctx, v, now.Add(-30*time.Minute))
	require.NoError(t, err)
	require.Equal(t, 2, forgot, "a and b: b given first")
	for b, want := range []int64{0, 1} {
		n, err := s.MovesGiven(ctx, v, b)
		require.NoError(t, err)
		require.Equal(t, want, n, "bucket %d keeps the ids of the moves after the cutoff", b)
	}
	stocks, err := s.BucketStocks(ctx, v, 2)
	require.NoError(t, err)
	require.Equal(t, []int64{26, 14}, stocks, "b given by the sweep")

	require.NoError(t, s.GiveOnly(ctx, v, 0, 5, old("a")), "a caller still holding a")
	n, err := s.TakeOnly(ctx, v, 1, 0, 4, old("d"))
	require.NoError(t, err)
	require.Zero(t, n, "a take of an id made before the cutoff")
	requireStock(t, s, v, 40)
	forgot, err = s.ForgetMoves(ctx, v, now.Add(-30*time.Minute))
	require.NoError(t, err)
	require.Zero(t, forgot)

	// Moves made since work as before: every unit sells.
	checkSale(t, s, v, 40, 1, claimAll(t, s, v, usersIn(1, 2, 60), 1))
}

// Two sweeps forgetting moves a few milliseconds old, over and over,
// while buyers of two of four buckets drain them by refills: the
// voucher keeps exactly its units, and sells every one once the sweeps
// stop (a refill refused meanwhile, its take's id older than a sweep's
// cutoff, sold nothing it should not have).
func TestForgettingMovesRacingRefillsMakesAndLosesNoUnit(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, 8)
	const v, stock = 13, 2000
	seedVoucher(t, s, rdb.Voucher{ID: v, Stock: stock, PerUserLimit: 1, Buckets: 4})
	buyers := append(usersIn(0, 4, 1200), usersIn(3, 4, 1200)...)

	done := make(chan struct{})
	var sweeps, forgotten atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				n, err := s.ForgetMoves(ctx, v, time.Now().Add(-5*time.Millisecond))
				if err != nil {
					t.Error(err)
					return
				}
				sweeps.Add(1)
				forgotten.Add(int64(n))
			}
		}()
	}
	res := claimAll(t, s, v, buyers[:1600], 1)
	close(done)
	wg.Wait()
	require.Positive(t, forgotten.Load(), "%d sweeps forgot no move", sweeps.Load())
	_, err := s.FinishMoves(ctx, v)
	require.NoError(t, err)
	admitted := 0
	for _, r := range res {
		if r.err == nil {
			admitted++
		}
	}
	left, _, err := s.RemainingStock(ctx, v)
	require.NoError(t, err)
	require.EqualValues(t, stock, int64(admitted)+left, "admitted + left in Redis = the stock (%d sweeps)", sweeps.Load())

	res = append(res, claimAll(t, s, v, buyers[1600:], 1)...)
	checkSale(t, s, v, stock, 1, res)
}
