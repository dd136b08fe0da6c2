package rdb_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
)

// A call that reaches Redis after its claim's horizon takes nothing: no
// unit, no count, no order in the stream, no idempotency record, its
// proof of work unspent; it is refused ErrPastHorizon. A claim with a
// later horizon is admitted as usual, and a keyed retry of it past the
// horizon is still answered its admission: a replay takes nothing.
func TestAClaimPastItsHorizonTakesNothing(t *testing.T) {
	s := newStore(t, 1)
	ctx := context.Background()
	seedVoucher(t, s, rdb.Voucher{ID: 1, Stock: 5, PerUserLimit: 5, ProofOfWork: 10})
	past, future := time.Now().Add(-time.Second), time.Now().Add(time.Minute)
	c := admission.Claim{VoucherID: 1, UserID: "ann", Now: t0, Day: d0, IdempotencyKey: "press-1", IdempotencyTTL: time.Hour,
		Proof: rdb.Proof{ID: "sig-1", Max: 10, TTL: time.Minute}, Serial: admission.NewSerial(), Horizon: past}
	_, err := testrdb.Admitter(s).Admit(ctx, c)
	require.ErrorIs(t, err, rdb.ErrPastHorizon)
	requireStock(t, s, 1, 5)
	n, err := s.UserCount(ctx, 1, "ann")
	require.NoError(t, err)
	require.Zero(t, n)
	for _, key := range []string{"flashsale:{p0}:v:1:proof:sig-1", "flashsale:{p0}:v:1:idem:ann:press-1"} {
		exists, err := s.Client().Exists(ctx, key).Result()
		require.NoError(t, err)
		require.Zero(t, exists, "%s written past the horizon", key)
	}
	xlen, err := s.Client().XLen(ctx, rdb.StreamKey(0)).Result()
	require.NoError(t, err)
	require.Zero(t, xlen, "no order in the stream")

	c.Horizon = future
	a, err := testrdb.Admitter(s).Admit(ctx, c)
	require.NoError(t, err)
	require.False(t, a.Replayed)
	requireStock(t, s, 1, 4)
	c.Horizon = past
	replay, err := testrdb.Admitter(s).Admit(ctx, c)
	require.NoError(t, err, "a replay past the horizon takes nothing: it is answered")
	require.True(t, replay.Replayed)
	require.Equal(t, a.OrderID, replay.OrderID)
	requireStock(t, s, 1, 4)

	// A call carries its claims' earliest horizon: a claim sent with one
	// past it is refused with it.
	seedVoucher(t, s, rdb.Voucher{ID: 2, Stock: 5, PerUserLimit: 1})
	_, errs, err := testrdb.Admitter(s).AdmitMany(ctx, []admission.Claim{
		{VoucherID: 2, UserID: "bob", Now: t0, Day: d0, Horizon: future},
		{VoucherID: 2, UserID: "cid", Now: t0, Day: d0, Horizon: past},
	})
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], rdb.ErrPastHorizon)
	require.ErrorIs(t, errs[1], rdb.ErrPastHorizon)
	requireStock(t, s, 2, 5)
}

// A claim's serial travels into its order: the buyer's pending orders and
// the stream's readers see it, so two claims of one buyer in one
// millisecond are told apart by the order each made.
func TestAClaimsSerialIsInItsOrder(t *testing.T) {
	s := newStore(t, 1)
	ctx := context.Background()
	seedVoucher(t, s, rdb.Voucher{ID: 1, Stock: 5, PerUserLimit: 2})
	first, second := admission.NewSerial(), admission.NewSerial()
	horizon := time.Now().Add(time.Minute)
	_, errs, err := testrdb.Admitter(s).AdmitMany(ctx, []admission.Claim{
		{VoucherID: 1, UserID: "ann", Now: t0, Day: d0, Serial: first, Horizon: horizon},
		{VoucherID: 1, UserID: "ann", Now: t0, Day: d0, Serial: second, Horizon: horizon},
		{VoucherID: 1, UserID: "ann", Now: t0, Day: d0, Serial: admission.NewSerial(), Horizon: horizon},
	})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.ErrorIs(t, errs[2], rdb.ErrUserLimit)
	pending, err := s.UserPending(ctx, 1, "ann")
	require.NoError(t, err)
	require.Len(t, pending, 2)
	require.Equal(t, []uint64{first, second}, []uint64{pending[0].Claim, pending[1].Claim})
	require.NoError(t, s.EnsureGroups(ctx))
	read, err := s.ReadGroup(ctx, 0, "w", ">", 10, time.Millisecond)
	require.NoError(t, err)
	require.Len(t, read, 2)
	for i, e := range read {
		require.NoError(t, e.Err)
		require.Equal(t, pending[i].Claim, e.Order.Claim)
	}
}
