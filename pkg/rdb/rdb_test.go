package rdb_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/lua"
	"github.com/flashsale/flashsale/pkg/internal/testclock"
	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/internal/wait"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
	"github.com/flashsale/flashsale/pkg/rdb/upkeep"
)

// t0 is the tests' sale start, from the clock: a voucher's keys expire a
// while after its sale ends, so a sale seeded on a calendar date vanishes
// as it is written once that date is past. d0 is its UTC day.
var (
	t0 = testclock.Start()
	d0 = order.Day(t0, time.UTC)
)

// cluster, with -redis-cluster, is the Redis Cluster of three masters
// every test of the package runs against instead of one redis-server:
// make test runs the package both ways.
var cluster *testsrv.Cluster

func TestMain(m *testing.M) { testsrv.MainMaybeOnCluster(m, &cluster) }

func newStore(t testing.TB, partitions int) *rdb.Store {
	return testrdb.NewStore(t, cluster, partitions)
}

// A Redis that lost its data (restarted empty) lost the partitions' loaded
// marks with it: a voucher missing there is an outage, not an unknown
// voucher, until the reaper has rebuilt what MySQL has on sale and marked
// the partition again. A voucher Redis holds is admitted either way.
func TestAVoucherMissingFromAnUnloadedPartitionIsNotLoaded(t *testing.T) {
	s := newStore(t, 2)
	ctx := context.Background()
	seedVoucher(t, s, rdb.Voucher{ID: 4, Stock: 5})
	for p := range 2 { // one by one: on a cluster they are in two slots
		require.NoError(t, s.Client().Del(ctx, rdb.LoadedKey(p)).Err())
	}
	unloaded, err := s.Unloaded(ctx)
	require.NoError(t, err)
	require.Equal(t, []int{0, 1}, unloaded)

	_, err = testrdb.Admitter(s).Admit(ctx, admission.Claim{VoucherID: 6, UserID: "a", Now: t0, Day: d0})
	require.ErrorIs(t, err, rdb.ErrNotLoaded)
	_, err = testrdb.Admitter(s).Admit(ctx, admission.Claim{VoucherID: 4, UserID: "a", Now: t0, Day: d0})
	require.NoError(t, err)
	n, zero, err := s.PresentBuckets(ctx, 4, 1)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.True(t, zero)
	n, zero, err = s.PresentBuckets(ctx, 6, 1)
	require.NoError(t, err)
	require.Zero(t, n)
	require.False(t, zero)

	require.NoError(t, s.MarkLoaded(ctx, 0))
	_, err = testrdb.Admitter(s).Admit(ctx, admission.Claim{VoucherID: 6, UserID: "a", Now: t0, Day: d0})
	require.ErrorIs(t, err, rdb.ErrVoucherNotFound)
	_, err = testrdb.Admitter(s).Admit(ctx, admission.Claim{VoucherID: 7, UserID: "a", Now: t0, Day: d0})
	require.ErrorIs(t, err, rdb.ErrNotLoaded, "partition 1 is still not loaded")
}

// keyedClaim is user's claim under idempotency key k.
func keyedClaim(v int64, user, k string) admission.Claim {
	return admission.Claim{VoucherID: v, UserID: user, IdempotencyKey: k, IdempotencyTTL: time.Hour, Now: t0, Day: d0}
}

func seedVoucher(t testing.TB, s *rdb.Store, v rdb.Voucher) rdb.Voucher {
	return testrdb.SeedVoucher(t, s, v)
}

func claim(s *rdb.Store, v int64, user string, now time.Time) (admission.Admission, error) {
	return testrdb.Claim(s, v, user, now)
}

func requireStock(t *testing.T, s *rdb.Store, v, want int64) {
	t.Helper()
	testrdb.RequireStock(t, s, v, want)
}

func TestAdmitRejections(t *testing.T) {
	s := newStore(t, 4)
	seedVoucher(t, s, rdb.Voucher{ID: 1, Stock: 5, StartsAt: t0, EndsAt: t0.Add(time.Hour)})
	seedVoucher(t, s, rdb.Voucher{ID: 2, Stock: 0})
	seedVoucher(t, s, rdb.Voucher{ID: 3, Stock: 10, PerUserLimit: 2})
	seedVoucher(t, s, rdb.Voucher{ID: 4, Stock: 10, PerUserLimit: 5, PerUserDailyLimit: 1})

	tests := []struct {
		name    string
		voucher int64
		prior   int // admitted claims by the same user first
		now     time.Time
		wantErr error
	}{
		{name: "unknown voucher", voucher: 99, now: t0, wantErr: rdb.ErrVoucherNotFound},
		{name: "before the window", voucher: 1, now: t0.Add(-time.Millisecond), wantErr: rdb.ErrNotStarted},
		{name: "at window end", voucher: 1, now: t0.Add(time.Hour), wantErr: rdb.ErrEnded},
		{name: "sold out", voucher: 2, now: t0, wantErr: rdb.ErrSoldOut},
		{name: "user limit", voucher: 3, prior: 2, now: t0, wantErr: rdb.ErrUserLimit},
		{name: "daily limit", voucher: 4, prior: 1, now: t0, wantErr: rdb.ErrDailyLimit},
		{name: "admitted", voucher: 1, now: t0.Add(time.Minute)},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			user := fmt.Sprintf("u%d", i)
			for range tt.prior {
				_, err := claim(s, tt.voucher, user, tt.now)
				require.NoError(t, err)
			}
			_, err := claim(s, tt.voucher, user, tt.now)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
			} else {
				require.NoError(t, err)
			}
		})
	}
	requireStock(t, s, 2, 0) // a rejection takes nothing
	requireStock(t, s, 3, 8)
	requireStock(t, s, 4, 9)
}

func TestAdmitWritesTheOrderToItsPartition(t *testing.T) {
	s := newStore(t, 4)
	seedVoucher(t, s, rdb.Voucher{ID: 7, Stock: 3})
	a, err := claim(s, 7, "alice", t0)
	require.NoError(t, err)
	p, _, _ := order.EntryOf(a.OrderID)
	require.Equal(t, s.PartitionOf(7), p)

	o, found, err := s.PendingOrder(context.Background(), a.OrderID)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, order.Order{ID: a.OrderID, VoucherID: 7, UserID: "alice", CreatedAt: t0, Day: d0, Quantity: 1}, o)
	requireStock(t, s, 7, 2)
}

func TestDailyLimitRollsOverAtMidnight(t *testing.T) {
	s := newStore(t, 2)
	seedVoucher(t, s, rdb.Voucher{ID: 5, Stock: 10, PerUserLimit: 3, PerUserDailyLimit: 1})
	shanghai := time.FixedZone("CST", 8*3600)
	day := func(now time.Time) string { return order.Day(now, shanghai) }
	admit := func(now time.Time) error {
		_, err := testrdb.Admitter(s).Admit(context.Background(), admission.Claim{VoucherID: 5, UserID: "bob", Now: now, Day: day(now)})
		return err
	}
	// One second before midnight in Shanghai (16:00 UTC); one second later
	// it is tomorrow there.
	beforeMidnight := testclock.BeforeMidnight(shanghai, time.Second)
	require.NoError(t, admit(beforeMidnight))
	require.ErrorIs(t, admit(beforeMidnight), rdb.ErrDailyLimit)
	require.NoError(t, admit(beforeMidnight.Add(time.Second)))
	require.ErrorIs(t, admit(beforeMidnight.Add(2*time.Second)), rdb.ErrDailyLimit)
	require.NoError(t, admit(beforeMidnight.Add(25*time.Hour)))
	// The total limit still holds across days.
	require.ErrorIs(t, admit(beforeMidnight.Add(49*time.Hour)), rdb.ErrUserLimit)
	requireStock(t, s, 5, 7)
}

func TestIdempotentReplay(t *testing.T) {
	s := newStore(t, 2)
	seedVoucher(t, s, rdb.Voucher{ID: 8, Stock: 10, PerUserLimit: 5})
	c := admission.Claim{VoucherID: 8, UserID: "carol", IdempotencyKey: "k1", IdempotencyTTL: time.Hour, Now: t0, Day: d0}
	first, err := testrdb.Admitter(s).Admit(context.Background(), c)
	require.NoError(t, err)
	require.False(t, first.Replayed)
	again, err := testrdb.Admitter(s).Admit(context.Background(), c)
	require.NoError(t, err)
	require.Equal(t, admission.Admission{OrderID: first.OrderID, Replayed: true}, again)
	requireStock(t, s, 8, 9)
	n, err := s.UserCount(context.Background(), 8, "carol")
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	// Another key is another claim; another user's same key is theirs alone.
	c.IdempotencyKey = "k2"
	other, err := testrdb.Admitter(s).Admit(context.Background(), c)
	require.NoError(t, err)
	require.NotEqual(t, first.OrderID, other.OrderID)
	c.UserID, c.IdempotencyKey = "dave", "k1"
	daves, err := testrdb.Admitter(s).Admit(context.Background(), c)
	require.NoError(t, err)
	require.False(t, daves.Replayed)
	requireStock(t, s, 8, 7)
}

func TestConcurrentClaimsNeverOversell(t *testing.T) {
	s := newStore(t, 4)
	const stock, users, perUser = 100, 400, 3
	seedVoucher(t, s, rdb.Voucher{ID: 11, Stock: stock, PerUserLimit: 2})
	var mu sync.Mutex
	admitted := map[int64]string{}
	perUserCount := map[string]int{}
	var wg sync.WaitGroup
	for u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := "user" + strconv.Itoa(u)
			for range perUser {
				a, err := claim(s, 11, user, t0)
				if err != nil {
					require.ErrorIs(t, err, testrdb.ErrOneOf(err, rdb.ErrSoldOut, rdb.ErrUserLimit))
					continue
				}
				mu.Lock()
				admitted[a.OrderID] = user
				perUserCount[user]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, admitted, stock, "exactly the stock is admitted, each with its own order id")
	for u, n := range perUserCount {
		require.LessOrEqual(t, n, 2, u)
	}
	requireStock(t, s, 11, 0)
	length, err := s.Client().XLen(context.Background(), rdb.StreamKey(s.PartitionOf(11))).Result()
	require.NoError(t, err)
	require.EqualValues(t, stock, length)
}

func TestReleaseIsExactlyOnce(t *testing.T) {
	s := newStore(t, 2)
	seedVoucher(t, s, rdb.Voucher{ID: 12, Stock: 1, PerUserLimit: 1, PerUserDailyLimit: 1})
	a, err := claim(s, 12, "erin", t0)
	require.NoError(t, err)
	_, err = claim(s, 12, "frank", t0)
	require.ErrorIs(t, err, rdb.ErrSoldOut)

	o := order.Order{ID: a.OrderID, VoucherID: 12, UserID: "erin", Day: d0}
	for i, want := range []bool{true, false, false} {
		released, err := s.Release(context.Background(), o, t0)
		require.NoError(t, err)
		require.Equal(t, want, released, "call %d", i)
	}
	requireStock(t, s, 12, 1)
	// The unit and erin's limits are free again, once.
	_, err = claim(s, 12, "erin", t0)
	require.NoError(t, err)
	requireStock(t, s, 12, 0)
}

func TestAckDeletesAndReadGroupRedelivers(t *testing.T) {
	s := newStore(t, 1)
	ctx := context.Background()
	seedVoucher(t, s, rdb.Voucher{ID: 3, Stock: 5, PerUserLimit: 5})
	for range 3 {
		_, err := claim(s, 3, "gina", t0)
		require.NoError(t, err)
	}
	got, err := s.ReadGroup(ctx, 0, "c1", ">", 10, 10*time.Millisecond)
	require.NoError(t, err)
	require.Len(t, got, 3)
	for _, e := range got {
		require.NoError(t, e.Err)
		require.Equal(t, "gina", e.Order.UserID)
	}
	// Unacknowledged entries come back to the same consumer from id 0.
	again, err := s.ReadGroup(ctx, 0, "c1", "0", 10, 0)
	require.NoError(t, err)
	require.Equal(t, got, again)

	require.NoError(t, s.Ack(ctx, 0, got[:2]))
	b, err := s.PartitionBacklog(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, rdb.Backlog{Partition: 0, Length: 1, Orders: 1, Pending: 1}, b)
	_, found, err := s.PendingOrder(ctx, got[0].Order.ID)
	require.NoError(t, err)
	require.False(t, found, "an acknowledged order is no longer pending")

	// Dead-lettering copies the order; its stream entry goes with the ack.
	require.NoError(t, s.DeadLetter(ctx, got[2], "test"))
	b, err = s.PartitionBacklog(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, rdb.Backlog{Partition: 0, Length: 1, Orders: 1, Pending: 1, DeadLetters: 1}, b)
	require.NoError(t, s.Ack(ctx, 0, got[2:]))
	b, err = s.PartitionBacklog(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, rdb.Backlog{Partition: 0, Length: 0, Pending: 0, DeadLetters: 1}, b)
}

func TestPoisonEntryIsReported(t *testing.T) {
	s := newStore(t, 1)
	ctx := context.Background()
	require.NoError(t, s.Client().XAdd(ctx, &redis.XAddArgs{Stream: rdb.StreamKey(0), Values: []any{"voucher_id", "x"}}).Err())
	got, err := s.ReadGroup(ctx, 0, "c1", ">", 10, 10*time.Millisecond)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Error(t, got[0].Err)
}

func TestSequenceOverflowChangesNothing(t *testing.T) {
	s := newStore(t, 1)
	ctx := context.Background()
	seedVoucher(t, s, rdb.Voucher{ID: 1, Stock: 5})
	// An entry at a future millisecond with the last sequence an order id can
	// name: the next auto id lands on sequence 128 of that millisecond.
	future := time.Now().Add(time.Hour).UnixMilli()
	require.NoError(t, s.Client().XAdd(ctx, &redis.XAddArgs{Stream: rdb.StreamKey(0), ID: fmt.Sprintf("%d-127", future), Values: []any{"x", "y"}}).Err())
	_, err := claim(s, 1, "hank", t0)
	require.ErrorIs(t, err, rdb.ErrOverloaded)
	requireStock(t, s, 1, 5)
	n, err := s.UserCount(ctx, 1, "hank")
	require.NoError(t, err)
	require.Zero(t, n)
	length, err := s.Client().XLen(ctx, rdb.StreamKey(0)).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, length)
}

// A call whose stream entry cannot be numbered changed nothing, its
// claims' proofs of work included: the retry finds its proof unspent
// (it was answered proof_invalid).
func TestSequenceOverflowLeavesTheProofUnspent(t *testing.T) {
	s := newStore(t, 1)
	ctx := context.Background()
	seedVoucher(t, s, rdb.Voucher{ID: 1, Stock: 5, ProofOfWork: 10})
	future := time.Now().Add(time.Hour).UnixMilli()
	require.NoError(t, s.Client().XAdd(ctx, &redis.XAddArgs{Stream: rdb.StreamKey(0), ID: fmt.Sprintf("%d-127", future), Values: []any{"x", "y"}}).Err())
	c := admission.Claim{VoucherID: 1, UserID: "hank", Now: t0, Day: d0, Proof: rdb.Proof{ID: "sig-1", Max: 10, TTL: time.Minute}}
	spent := "flashsale:{p0}:v:1:proof:sig-1"
	for range 2 { // the retry meets the same overflow, not a spent proof
		_, err := testrdb.Admitter(s).Admit(ctx, c)
		require.ErrorIs(t, err, rdb.ErrOverloaded)
		n, err := s.Client().Exists(ctx, spent).Result()
		require.NoError(t, err)
		require.Zero(t, n, "the proof is unspent")
	}
	requireStock(t, s, 1, 5)
}

// A call whose second stream entry cannot be numbered keeps its first
// entry's 32 admissions and undoes the rest: their items back in the pool
// in their order, no idempotency record, no count, no order in the stream.
func TestSequenceOverflowUndoesOnlyTheEntryThatOverflowed(t *testing.T) {
	s := newStore(t, 1)
	ctx := context.Background()
	items := make([]order.Item, 40)
	for i := range items {
		items[i] = order.Item{No: int64(i + 1), Amount: 100}
	}
	seedVoucher(t, s, rdb.Voucher{ID: 1, Stock: 40, PerUserLimit: 1, Pooled: true, Items: items})
	future := time.Now().Add(time.Hour).UnixMilli()
	require.NoError(t, s.Client().XAdd(ctx, &redis.XAddArgs{Stream: rdb.StreamKey(0), ID: fmt.Sprintf("%d-126", future), Values: []any{"x", "y"}}).Err())
	claims := make([]admission.Claim, 40)
	for i := range claims {
		claims[i] = admission.Claim{VoucherID: 1, UserID: fmt.Sprint("u", i), Now: t0, Day: d0, IdempotencyKey: "k", IdempotencyTTL: time.Hour}
	}
	as, errs, err := testrdb.Admitter(s).AdmitMany(ctx, claims)
	require.NoError(t, err)
	for i := range claims {
		if i < 32 {
			require.NoError(t, errs[i], "claim %d", i)
			require.Equal(t, items[i], as[i].Item)
		} else {
			require.ErrorIs(t, errs[i], rdb.ErrOverloaded, "claim %d", i)
		}
	}
	requireStock(t, s, 1, 8)
	left, err := s.Client().LRange(ctx, "flashsale:{p0}:v:1:pool", 0, -1).Result()
	require.NoError(t, err)
	want := make([]string, 0, 8)
	for _, it := range items[32:] {
		want = append(want, it.Encode())
	}
	require.Equal(t, want, left, "the undone items are back, in their order")
	for u, want := range map[string]int64{"u0": 1, "u31": 1, "u32": 0, "u39": 0} {
		n, err := s.UserCount(ctx, 1, u)
		require.NoError(t, err)
		require.Equal(t, want, n, u)
	}
	idem, err := s.Client().Exists(ctx, "flashsale:{p0}:v:1:idem:u32:k").Result()
	require.NoError(t, err)
	require.Zero(t, idem, "no idempotency record for an undone admission")
	b, err := s.PartitionBacklog(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, int64(2), b.Length, "the entry written by hand and the call's first")
	require.Equal(t, int64(32), b.Orders)
}

// A call's admissions travel in one stream entry that a person can read
// (XRANGE: voucher_id, then o0, o1, ... each "user created_ms day
// quantity[ item]"); a consumer reads them as one order each; the backlog
// counts orders, and acknowledging an entry twice takes its orders off
// once.
func TestOneStreamEntryCarriesACallsOrders(t *testing.T) {
	s := newStore(t, 1)
	ctx := context.Background()
	seedVoucher(t, s, rdb.Voucher{ID: 1, Stock: 10, PerUserLimit: 5})
	claims := []admission.Claim{{UserID: "ann", Quantity: 2}, {UserID: "bob"}, {UserID: "ann"}}
	for i := range claims {
		claims[i].VoucherID, claims[i].Now, claims[i].Day = 1, t0, d0
	}
	as, errs, err := testrdb.Admitter(s).AdmitMany(ctx, claims)
	require.NoError(t, err)
	for _, e := range errs {
		require.NoError(t, e)
	}
	msgs, err := s.Client().XRange(ctx, rdb.StreamKey(0), "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	ms := strconv.FormatInt(t0.UnixMilli(), 10)
	require.Equal(t, map[string]any{"voucher_id": "1", "o0": "ann " + ms + " " + d0 + " 2", "o1": "bob " + ms + " " + d0 + " 1",
		"o2": "ann " + ms + " " + d0 + " 1"}, msgs[0].Values)

	got, err := s.ReadGroup(ctx, 0, "c1", ">", 10, 0)
	require.NoError(t, err)
	require.Len(t, got, 3)
	for i, e := range got {
		require.NoError(t, e.Err)
		require.Equal(t, msgs[0].ID, e.StreamID)
		require.Equal(t, i, e.Index)
		require.Equal(t, as[i].OrderID, e.Order.ID)
		require.Equal(t, claims[i].UserID, e.Order.UserID)
		o, found, err := s.PendingOrder(ctx, as[i].OrderID)
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, e.Order, o)
	}
	pending, err := s.UserPending(ctx, 1, "ann")
	require.NoError(t, err)
	require.Equal(t, []int64{as[0].OrderID, as[2].OrderID}, orderIDs(pending), "one order each, not the entry twice")

	b, err := s.PartitionBacklog(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, rdb.Backlog{Partition: 0, Length: 1, Orders: 3, Pending: 1}, b)
	require.NoError(t, s.Ack(ctx, 0, got))
	require.NoError(t, s.Ack(ctx, 0, got), "a second ack (the reaper's, after a worker's)")
	b, err = s.PartitionBacklog(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, rdb.Backlog{Partition: 0}, b)
}

// An entry deleted unacknowledged (an operator's XDEL) leaves the backlog
// count too high only until the stream is empty: the acknowledgement that
// empties it drops the count.
func TestTheBacklogCountHealsWhenTheStreamEmpties(t *testing.T) {
	s := newStore(t, 1)
	ctx := context.Background()
	seedVoucher(t, s, rdb.Voucher{ID: 1, Stock: 10})
	for _, u := range []string{"a", "b", "c"} {
		_, err := claim(s, 1, u, t0)
		require.NoError(t, err)
	}
	got, err := s.ReadGroup(ctx, 0, "c1", ">", 10, 0)
	require.NoError(t, err)
	require.Len(t, got, 3)
	require.NoError(t, s.Client().XDel(ctx, rdb.StreamKey(0), got[0].StreamID).Err())
	require.NoError(t, s.Ack(ctx, 0, got[1:2]))
	b, err := s.PartitionBacklog(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, int64(2), b.Orders, "the deleted entry's order still counted while the stream holds one")
	require.NoError(t, s.Ack(ctx, 0, got[2:]))
	b, err = s.PartitionBacklog(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, rdb.Backlog{Partition: 0, Pending: 1}, b, "empty: no order counted (the deleted one stays pending until the reaper acknowledges it)")
}

func TestLeaseRenewsOnlyWhatTheConsumerOwns(t *testing.T) {
	s := newStore(t, 1)
	ctx := context.Background()
	seedVoucher(t, s, rdb.Voucher{ID: 1, Stock: 5, PerUserLimit: 5})
	for range 2 {
		_, err := claim(s, 1, "ivy", t0)
		require.NoError(t, err)
	}
	got, err := s.ReadGroup(ctx, 0, "w1", ">", 10, 10*time.Millisecond)
	require.NoError(t, err)
	ids := []string{got[0].StreamID, got[1].StreamID}
	pending := func() []redis.XPendingExt {
		pend, err := s.Client().XPendingExt(ctx, &redis.XPendingExtArgs{Stream: rdb.StreamKey(0), Group: rdb.DefaultGroup, Start: "-", End: "+", Count: 10}).Result()
		require.NoError(t, err)
		return pend
	}
	aged := time.Duration(0)
	wait.For(t, 10*time.Second, "the entries aged, to see the idle time reset", func() bool {
		aged = time.Hour
		for _, p := range pending() {
			aged = min(aged, p.Idle)
		}
		return aged >= 30*time.Millisecond
	})

	n, err := s.RenewLease(ctx, 0, "w1", ids)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for _, p := range pending() {
		require.Less(t, p.Idle, aged, "idle time reset")
		require.EqualValues(t, 1, p.RetryCount, "a renewal is not a delivery")
	}
	// Another consumer (a reaper) takes one over; the first cannot take it back.
	c, err := upkeep.New(s).TakeOver(ctx, 0, "reaper", 0, "0-0", 1)
	require.NoError(t, err)
	require.Len(t, c.Orders, 1)
	require.EqualValues(t, 2, c.Deliveries[c.Orders[0].StreamID])
	n, err = s.RenewLease(ctx, 0, "w1", ids)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// keysOf lists the keys matching pattern, on every master of a cluster.
func keysOf(t *testing.T, s *rdb.Store, pattern string) []string {
	t.Helper()
	ctx := context.Background()
	cc, ok := s.Client().(*redis.ClusterClient)
	if !ok {
		keys, err := s.Client().Keys(ctx, pattern).Result()
		require.NoError(t, err)
		return keys
	}
	var mu sync.Mutex
	var out []string
	require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		keys, err := n.Keys(ctx, pattern).Result()
		mu.Lock()
		out = append(out, keys...)
		mu.Unlock()
		return err
	}))
	return out
}

// On a cluster the partitions' streams (and their vouchers' keys, which
// share each stream's hash tag) spread over the masters.
func TestPartitionsSpreadOverTheMasters(t *testing.T) {
	if cluster == nil {
		t.Skip("run with -redis-cluster (make test does)")
	}
	s := newStore(t, 8)
	cc := s.Client().(*redis.ClusterClient)
	var mu sync.Mutex
	perMaster := map[string]int{}
	require.NoError(t, cc.ForEachMaster(context.Background(), func(ctx context.Context, n *redis.Client) error {
		keys, err := n.Keys(ctx, "flashsale:*:orders").Result()
		mu.Lock()
		perMaster[n.Options().Addr] = len(keys)
		mu.Unlock()
		return err
	}))
	spread := 0
	total := 0
	for _, n := range perMaster {
		total += n
		if n > 0 {
			spread++
		}
	}
	require.Equal(t, 8, total)
	require.GreaterOrEqual(t, spread, 2, "%v", perMaster)
}

// A Redis that lost its data lost the consumer group: reading says so in a
// way the workers recognise (IsNoGroup) through the store's wrapping, so
// they create the groups again rather than retry a read that cannot work.
func TestReadingAStreamWithoutItsGroupIsNoGroup(t *testing.T) {
	s := newStore(t, 2)
	ctx := context.Background()
	for p := range 2 {
		require.NoError(t, s.Client().Del(ctx, rdb.StreamKey(p)).Err())
	}
	_, err := s.ReadGroup(ctx, 1, "w", ">", 10, time.Millisecond)
	require.Error(t, err)
	require.True(t, rdb.IsNoGroup(err), "%v", err)
	require.False(t, rdb.IsNoGroup(fmt.Errorf("read: %w", context.DeadlineExceeded)))
	require.NoError(t, s.EnsureGroups(ctx))
	_, err = s.ReadGroup(ctx, 1, "w", ">", 10, time.Millisecond)
	require.NoError(t, err)
}

// A claim whose user id or pass would not read back from its line (a
// space, a newline: another claim; empty) is refused before the call, and
// the claims beside it in the call are decided as if it were not there:
// nothing is taken for a user it might have read as.
func TestAClaimThatCannotTravelInALineIsRefusedAlone(t *testing.T) {
	s := newStore(t, 1)
	seedVoucher(t, s, rdb.Voucher{ID: 41, Stock: 10})
	claims := []admission.Claim{
		{VoucherID: 41, UserID: "amy", Now: t0, Day: d0},
		{VoucherID: 41, UserID: "ben 0 1", Now: t0, Day: d0},
		{VoucherID: 41, UserID: "cal\ndan", Now: t0, Day: d0},
		{VoucherID: 41, UserID: "", Now: t0, Day: d0},
		{VoucherID: 41, UserID: "eli", Now: t0, Day: d0, Pass: "1 2:3"},
		{VoucherID: 41, UserID: "fay", Now: t0, Day: d0},
	}
	out, errs, err := testrdb.Admitter(s).AdmitMany(context.Background(), claims)
	require.NoError(t, err)
	for i, c := range claims {
		if i == 0 || i == len(claims)-1 {
			require.NoError(t, errs[i], c.UserID)
			require.NotZero(t, out[i].OrderID)
			continue
		}
		require.ErrorIs(t, errs[i], admission.ErrUnsendable, "%q", c.UserID)
	}
	requireStock(t, s, 41, 8)
	for _, u := range []string{"ben", "cal", "dan", "eli"} {
		n, err := s.UserCount(context.Background(), 41, u)
		require.NoError(t, err)
		require.Zero(t, n, "nothing taken for %s", u)
	}
}

// admit.lua reads each claim line whole: a line it cannot parse fails
// the call before anything changes, where an unanchored reading took a
// malformed field for another claim from the middle of its line. (The
// gateway never sends one: rdb refuses such a claim as unsendable.)
func TestAdmitLuaRefusesALineItCannotParse(t *testing.T) {
	s := newStore(t, 1)
	ctx := context.Background()
	seedVoucher(t, s, rdb.Voucher{ID: 1, Stock: 5, PerUserLimit: 5})
	call := testrdb.Admitter(s).AdmissionCall([]admission.Claim{{VoucherID: 1, UserID: "ann", Now: t0, Day: d0}})
	nkeys := call[0].(int)
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = call[1+i].(string)
	}
	argv := call[1+nkeys:]
	lines := argv[4].([]byte)
	require.Equal(t, "ann\n", string(lines), "ARGV[5] is the claim lines")
	for _, bad := range []string{"ann 0 5x\n", "ann zz\n", "ann 0 0 1 1 0 0 0 0 0 0 0 7\n", "ann\nbob 0 0 two\n", "ann", "ann\n\n", "ann 0 0 0\n", "ann 0 0 1 9\n"} {
		args := append([]any{}, argv...)
		args[4] = bad
		err := lua.Admit.Run(ctx, s.Client(), keys, args...).Err()
		require.Error(t, err, "%q", bad)
		require.Contains(t, err.Error(), "is not a claim line", "%q", bad)
	}
	requireStock(t, s, 1, 5)
	n, err := s.UserCount(ctx, 1, "ann")
	require.NoError(t, err)
	require.Zero(t, n, "nothing refused was admitted")
	args := append([]any{}, argv...)
	args[4] = "ann 0 0 2\n"
	require.NoError(t, lua.Admit.Run(ctx, s.Client(), keys, args...).Err(), "a whole line is read")
	requireStock(t, s, 1, 3)
}

// On a cluster, an admission whose reply does not come within the read
// timeout is never sent again by go-redis: its cluster client resends a
// pipeline after a timeout or a broken connection, and Redis, which had
// only been slow, would run the call as many times (here its master is
// stopped, SIGSTOP, while the client times out and resends, then resumed
// and reads what waits in its sockets).
// The caller gets the error; the claim runs once.
func TestAClusterNeverResendsAnAdmission(t *testing.T) {
	if cluster == nil {
		t.Skip("a cluster's client resends; a single Redis's is set not to (MaxRetries -1)")
	}
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), ReadTimeout: 150 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { cc.Close() })
	s, err := rdb.New(cc, 4, "")
	require.NoError(t, err)
	require.NoError(t, s.Load(ctx))
	require.NoError(t, s.EnsureGroups(ctx))
	const v = 77
	seedVoucher(t, s, rdb.Voucher{ID: v, Stock: 100, PerUserLimit: 10})
	master, err := cluster.MasterOf(ctx, s.VoucherKey(v))
	require.NoError(t, err)
	require.NoError(t, master.Pause()) // SIGSTOP: what it was sent waits in its socket
	_, err = testrdb.Admitter(s).Admit(ctx, admission.Claim{VoucherID: v, UserID: "slow", Now: t0, Day: d0})
	require.NoError(t, master.Resume())
	require.Error(t, err, "no reply within the read timeout")
	wait.For(t, 30*time.Second, "the paused master ran the call", func() bool {
		n, err := s.UserCount(ctx, v, "slow")
		return err == nil && n > 0
	})
	time.Sleep(200 * time.Millisecond) // anything resent waited in its sockets too, and ran with it
	n, err := s.UserCount(ctx, v, "slow")
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the call ran once")
	requireStock(t, s, v, 99)
}
