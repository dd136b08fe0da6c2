package rdb_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
)

// outcome is what a claim came to, comparable across two runs: the error,
// or the admission with the claim (index) whose admission a replay
// answered and the item taken.
type outcome struct {
	err      error
	replayOf int // -1: a new admission
	item     order.Item
	entry    bool
}

// decide runs claims of voucher v, all in one AdmitMany (one script call
// per bucket) or one by one, and says what each came to.
func decide(t *testing.T, s *rdb.Store, v int64, claims []admission.Claim, batch bool) []outcome {
	t.Helper()
	ctx := context.Background()
	as, errs := make([]admission.Admission, len(claims)), make([]error, len(claims))
	if batch {
		var err error
		as, errs, err = testrdb.Admitter(s).AdmitMany(ctx, claims)
		require.NoError(t, err)
	} else {
		for i, c := range claims {
			as[i], errs[i] = testrdb.Admitter(s).Admit(ctx, c)
		}
	}
	first := map[int64]int{}
	out := make([]outcome, len(claims))
	for i := range claims {
		out[i] = outcome{err: errs[i], replayOf: -1}
		if errs[i] != nil {
			continue
		}
		out[i].item, out[i].entry = as[i].Item, as[i].Entry
		if as[i].Replayed {
			j, ok := first[as[i].OrderID]
			if !ok {
				j = -2 // an admission from before this run
			}
			out[i].replayOf = j
			continue
		}
		first[as[i].OrderID] = i
	}
	requireStreamHolds(t, s, v, claims, as, first)
	return out
}

// requireStreamHolds checks what the streams hold of voucher v: exactly
// one order per new admission (first: order id -> its claim), under the
// admission's order id, with the claim's user, day, units and item; and
// the backlog count of each partition is its stream's orders.
func requireStreamHolds(t *testing.T, s *rdb.Store, v int64, claims []admission.Claim, as []admission.Admission, first map[int64]int) {
	t.Helper()
	ctx := context.Background()
	seen := map[int64]bool{}
	for p := range s.Partitions() {
		es, err := s.StreamOrders(ctx, p)
		require.NoError(t, err)
		b, err := s.PartitionBacklog(ctx, p)
		require.NoError(t, err)
		require.EqualValues(t, len(es), b.Orders, "partition %d: the backlog counts the stream's orders", p)
		for _, e := range es {
			require.NoError(t, e.Err)
			if e.Order.VoucherID != v {
				continue
			}
			i, ok := first[e.Order.ID]
			require.True(t, ok, "order %d in the stream was not admitted", e.Order.ID)
			require.False(t, seen[e.Order.ID], "order %d twice in the stream", e.Order.ID)
			seen[e.Order.ID] = true
			c := claims[i]
			require.Equal(t, c.UserID, e.Order.UserID)
			require.Equal(t, c.Day, e.Order.Day)
			require.Equal(t, max(c.Quantity, 1), e.Order.Units())
			require.Equal(t, as[i].Item, e.Order.Item)
			require.Equal(t, as[i].Entry, e.Order.Entry)
		}
	}
	require.Len(t, seen, len(first), "every admission is one order in the stream")
}

// randomSale is a voucher and claims against it, drawn from r: stock,
// limits, a window, a pool or buckets, pauses; claims by a few users, with
// quantities (some too many), idempotency keys (some repeated), times in
// and out of the window, over two days.
func randomSale(r *rand.Rand, id int64) (rdb.Voucher, []admission.Claim, bool) {
	v := rdb.Voucher{ID: id, Stock: 1 + r.Int64N(20), PerUserLimit: 1 + r.Int64N(4)}
	if r.IntN(3) == 0 {
		v.PerUserDailyLimit = 1 + r.Int64N(3)
	}
	start := t0.Add(time.Duration(r.IntN(3)) * time.Minute)
	if r.IntN(2) == 0 {
		v.StartsAt, v.EndsAt = start, start.Add(30*time.Hour)
	}
	switch r.IntN(6) {
	case 0:
		v.Pooled = true
		v.Items = make([]order.Item, v.Stock)
		for i := range v.Items {
			v.Items[i] = order.Item{No: int64(i + 1), Amount: 1 + r.Int64N(100)}
		}
	case 1:
		v.Buckets = 3
		v.Stock = 200 // ample: no bucket runs dry, so the order across buckets does not matter
	case 2:
		// A draw (pkg/draw): entries, one per user, take no stock.
		v.Draw, v.PerUserLimit, v.PerUserDailyLimit = true, 1, 0
	case 3:
		// A proof-of-work gate: claims without a proof, with one too easy,
		// with one of a few (so some are used twice).
		v.ProofOfWork = 100
	}
	paused := r.IntN(10) == 0
	users := []string{"ann", "bob", "cid", "dee", "eve"}
	keys := []string{"", "", "", "k1", "k2"}
	claims := make([]admission.Claim, 1+r.IntN(40))
	for i := range claims {
		now := start.Add(time.Duration(r.IntN(32*60)-10) * time.Minute)
		claims[i] = admission.Claim{VoucherID: id, UserID: users[r.IntN(len(users))], IdempotencyKey: keys[r.IntN(len(keys))],
			IdempotencyTTL: time.Hour, Now: now, Day: order.Day(now, time.UTC), Quantity: int64(r.IntN(3))}
		if v.ProofOfWork > 0 {
			claims[i].Proof = []rdb.Proof{{}, {ID: "easy", Max: 50, TTL: time.Minute},
				{ID: "p1", Max: 100, TTL: time.Minute}, {ID: "p2", Max: 500, TTL: time.Minute}, {ID: fmt.Sprint("p", i+3), Max: 100, TTL: time.Minute}}[r.IntN(5)]
		}
	}
	return v, claims, paused
}

// A batch of claims, decided by one script call per bucket, comes
// to exactly what the same claims one by one do (a property over random
// sales: stock, per-user and per-day limits, replays of keys, also within
// the batch, quantities, windows, pauses, pools, buckets, draws' entries,
// proof-of-work gates with missing, too easy and reused proofs),
// and leaves the
// same stock and counts.
func TestABatchDecidesAsTheClaimsOneByOne(t *testing.T) {
	s := newStore(t, 4)
	ctx := context.Background()
	rounds := 150
	if testing.Short() {
		rounds = 30
	}
	soldOutInBatch, entries, proofRefusals := 0, 0, 0
	for round := range rounds {
		r := rand.New(rand.NewPCG(uint64(round), 18))
		// Two vouchers alike, each on its own keys: one decided in a batch,
		// the other claim by claim.
		base := int64(1000 + 2*round)
		vb, claims, paused := randomSale(r, base)
		vs := vb
		vs.ID = base + 1
		seedVoucher(t, s, vb)
		seedVoucher(t, s, vs)
		if paused {
			for _, v := range []int64{vb.ID, vs.ID} {
				yes := true
				_, _, err := s.ApplyChange(ctx, rdb.Change{ID: 1, VoucherID: v, Paused: &yes})
				require.NoError(t, err)
			}
		}
		same := make([]admission.Claim, len(claims))
		for i, c := range claims {
			c.VoucherID = vs.ID
			same[i] = c
		}
		batch := decide(t, s, vb.ID, claims, true)
		alone := decide(t, s, vs.ID, same, false)
		for i := range claims {
			msg := fmt.Sprintf("round %d claim %d %+v (voucher %+v)", round, i, claims[i], vb)
			require.True(t, errors.Is(batch[i].err, alone[i].err) || batch[i].err == alone[i].err, "%s: batch %v, alone %v", msg, batch[i].err, alone[i].err)
			require.Equal(t, alone[i].replayOf, batch[i].replayOf, msg)
			require.Equal(t, alone[i].item, batch[i].item, msg)
			if errors.Is(batch[i].err, rdb.ErrSoldOut) {
				soldOutInBatch++
			}
			if batch[i].entry {
				entries++
			}
			if errors.Is(batch[i].err, rdb.ErrProofRequired) || errors.Is(batch[i].err, rdb.ErrProofInvalid) {
				proofRefusals++
			}
		}
		stB, err := s.ReadVoucherState(ctx, vb.ID, dayStrings(claims))
		require.NoError(t, err)
		stS, err := s.ReadVoucherState(ctx, vs.ID, dayStrings(claims))
		require.NoError(t, err)
		require.Equal(t, stS.Voucher.Stock, stB.Voucher.Stock, "round %d: stock", round)
		if vb.Draw {
			require.Equal(t, vb.Stock, stB.Voucher.Stock, "round %d: entries take no stock", round)
			for u, n := range stB.Users {
				require.LessOrEqual(t, n, int64(1), "round %d: one entry for %s", round, u)
			}
		}
		require.Equal(t, stS.Users, stB.Users, "round %d: users' counts", round)
		require.Equal(t, stS.Days, stB.Days, "round %d: day counts", round)
		require.Equal(t, stS.Voucher.Items, stB.Voucher.Items, "round %d: pool", round)
	}
	require.Positive(t, soldOutInBatch, "some batches straddled the last unit")
	require.Positive(t, entries, "some sales were draws")
	require.Positive(t, proofRefusals, "some sales had a proof-of-work gate")
}

func dayStrings(claims []admission.Claim) []string {
	seen := map[string]bool{}
	var out []string
	for _, c := range claims {
		if !seen[c.Day] {
			seen[c.Day] = true
			out = append(out, c.Day)
		}
	}
	return out
}

// A batch larger than one script call takes (maxClaimsPerCall) is split
// into calls run in order: every claim is decided, the stock exactly.
func TestALargeBatchIsSplitIntoCalls(t *testing.T) {
	s := newStore(t, 2)
	seedVoucher(t, s, rdb.Voucher{ID: 77, Stock: 600})
	claims := make([]admission.Claim, 700)
	for i := range claims {
		claims[i] = admission.Claim{VoucherID: 77, UserID: fmt.Sprintf("big-%d", i), Now: t0, Day: d0}
	}
	as, errs, err := testrdb.Admitter(s).AdmitMany(context.Background(), claims)
	require.NoError(t, err)
	first := map[int64]int{}
	for i, e := range errs {
		if i < 600 {
			require.NoError(t, e, "claim %d", i)
			first[as[i].OrderID] = i
		} else {
			require.ErrorIs(t, e, rdb.ErrSoldOut, "claim %d", i)
		}
	}
	requireStock(t, s, 77, 0)
	requireStreamHolds(t, s, 77, claims, as, first)
	// Three calls (256, 256 and 188 claims) wrote their admissions 32
	// (order.MaxPerEntry) to a stream entry: 8 + 8 + 3 entries.
	b, err := s.PartitionBacklog(context.Background(), s.PartitionOf(77))
	require.NoError(t, err)
	require.Equal(t, rdb.Backlog{Partition: s.PartitionOf(77), Length: 19, Orders: 600}, b)
}
