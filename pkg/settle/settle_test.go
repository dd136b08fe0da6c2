package settle_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
	"github.com/flashsale/flashsale/pkg/settle"
)

func TestMain(m *testing.M) { testsrv.Main(m) }

// owed is what the reaper runs every pass.
func owed(t *testing.T, env *testenv.Env) int {
	t.Helper()
	n, err := settle.Owed(context.Background(), env.RDB, env.DB, 100, 0, time.Now)
	require.NoError(t, err)
	return n
}

func requireNothingOwed(t *testing.T, env *testenv.Env) {
	t.Helper()
	require.Zero(t, env.Count(t, "SELECT COUNT(*) FROM voucher_changes WHERE redis_applied_at IS NULL"), "every change marked applied")
}

func admit(t *testing.T, env *testenv.Env, v int64, user string) error {
	t.Helper()
	now := time.Now()
	_, err := testrdb.Admitter(env.RDB).Admit(context.Background(), admission.Claim{VoucherID: v, UserID: user, Now: now, Day: order.Day(now, time.UTC)})
	return err
}

func remaining(t *testing.T, env *testenv.Env, v int64) (int64, bool) {
	t.Helper()
	n, found, err := env.RDB.RemainingStock(context.Background(), v)
	require.NoError(t, err)
	return n, found
}

// Every write MySQL → Redis follows one protocol: recorded in MySQL, applied
// to Redis once, marked applied; when Redis misses it (a crash between the
// stores, Redis down), the reaper's pass applies it, and applies nothing
// twice. One case per operation.
func TestAWriteRedisMissedIsAppliedOnceByTheReaper(t *testing.T) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	newVoucher := func(t *testing.T, env *testenv.Env, stock int64) (db.Voucher, db.VoucherChange) {
		v := db.Voucher{Name: "missed", Stock: stock, StockTotal: stock, StockBuckets: 2, PerUserLimit: 1, PaymentTimeoutSeconds: 60, CreatedAt: now}
		ch, err := env.DB.CreateVoucher(ctx, &v, nil, db.ActorAdmin, now)
		require.NoError(t, err)
		return v, ch
	}

	t.Run("create", func(t *testing.T) {
		env := testenv.New(t, 4)
		v, _ := newVoucher(t, env, 10) // recorded; the process died before Redis
		_, found := remaining(t, env, v.ID)
		require.False(t, found)
		require.ErrorIs(t, admit(t, env, v.ID, "a"), rdb.ErrVoucherNotFound)
		require.Equal(t, 1, owed(t, env))
		n, found := remaining(t, env, v.ID)
		require.True(t, found)
		require.EqualValues(t, 10, n)
		require.NoError(t, admit(t, env, v.ID, "a"))
		requireNothingOwed(t, env)
		require.Zero(t, owed(t, env))
		n, _ = remaining(t, env, v.ID)
		require.EqualValues(t, 9, n, "nothing applied twice")
	})

	t.Run("create, Redis had it, the mark was lost", func(t *testing.T) {
		env := testenv.New(t, 4)
		v, ch := newVoucher(t, env, 10)
		a := settle.RedisVoucher(v, v.Stock)
		created, err := env.RDB.CreateVoucher(ctx, a, []int64{ch.ID})
		require.NoError(t, err)
		require.True(t, created)
		require.NoError(t, admit(t, env, v.ID, "a")) // a claim before the reaper comes
		require.Equal(t, 1, owed(t, env))
		n, _ := remaining(t, env, v.ID)
		require.EqualValues(t, 9, n, "the claim is not undone")
		requireNothingOwed(t, env)
	})

	t.Run("create with Redis down", func(t *testing.T) {
		env := testenv.New(t, 4)
		require.NoError(t, env.Redis.Stop())
		v, ch := newVoucher(t, env, 10)
		_, err := settle.Changes(ctx, env.RDB, env.DB, []db.VoucherChange{ch}, now)
		require.Error(t, err, "Redis is down")
		require.NoError(t, env.Redis.Start())
		require.NoError(t, env.RDB.EnsureGroups(ctx))
		require.Equal(t, 1, owed(t, env))
		n, found := remaining(t, env, v.ID)
		require.True(t, found)
		require.EqualValues(t, 10, n)
		requireNothingOwed(t, env)
	})

	for _, paused := range []bool{true, false} {
		name := map[bool]string{true: "pause", false: "resume"}[paused]
		t.Run(name, func(t *testing.T) {
			env := testenv.New(t, 4)
			v, ch := newVoucher(t, env, 10)
			_, err := settle.Changes(ctx, env.RDB, env.DB, []db.VoucherChange{ch}, now)
			require.NoError(t, err)
			if !paused { // paused first, through the protocol
				_, pch, err := env.DB.SetPaused(ctx, v.ID, true, db.ActorAdmin, now)
				require.NoError(t, err)
				_, err = settle.Changes(ctx, env.RDB, env.DB, []db.VoucherChange{pch}, now)
				require.NoError(t, err)
				require.ErrorIs(t, admit(t, env, v.ID, "a"), rdb.ErrPaused)
			}
			_, _, err = env.DB.SetPaused(ctx, v.ID, paused, db.ActorAdmin, now) // recorded; Redis missed it
			require.NoError(t, err)
			before := admit(t, env, v.ID, "b")
			require.Equal(t, 1, owed(t, env))
			after := admit(t, env, v.ID, "c")
			if paused {
				require.NoError(t, before)
				require.ErrorIs(t, after, rdb.ErrPaused)
			} else {
				require.ErrorIs(t, before, rdb.ErrPaused)
				require.NoError(t, after)
			}
			requireNothingOwed(t, env)
		})
	}

	t.Run("top-up", func(t *testing.T) {
		env := testenv.New(t, 4)
		v, ch := newVoucher(t, env, 10)
		_, err := settle.Changes(ctx, env.RDB, env.DB, []db.VoucherChange{ch}, now)
		require.NoError(t, err)
		_, _, err = env.DB.ChangeVoucher(ctx, v.ID, db.Edit{AddStock: 5}, now) // recorded; Redis missed it
		require.NoError(t, err)
		n, _ := remaining(t, env, v.ID)
		require.EqualValues(t, 10, n)
		require.Equal(t, 1, owed(t, env))
		require.Zero(t, owed(t, env))
		n, _ = remaining(t, env, v.ID)
		require.EqualValues(t, 15, n, "added once")
		requireNothingOwed(t, env)
	})

	t.Run("end", func(t *testing.T) {
		env := testenv.New(t, 4)
		v, ch := newVoucher(t, env, 10)
		_, err := settle.Changes(ctx, env.RDB, env.DB, []db.VoucherChange{ch}, now)
		require.NoError(t, err)
		ended := time.Now().Add(-time.Second).UTC().Truncate(time.Millisecond)
		_, _, err = env.DB.ChangeVoucher(ctx, v.ID, db.Edit{EndsAt: &ended}, now) // recorded; Redis missed it
		require.NoError(t, err)
		require.NoError(t, admit(t, env, v.ID, "a"), "Redis still sells")
		require.Equal(t, 1, owed(t, env))
		require.ErrorIs(t, admit(t, env, v.ID, "b"), rdb.ErrEnded)
		requireNothingOwed(t, env)
	})

	t.Run("proof-of-work gate", func(t *testing.T) {
		env := testenv.New(t, 4)
		v, ch := newVoucher(t, env, 10)
		_, err := settle.Changes(ctx, env.RDB, env.DB, []db.VoucherChange{ch}, now)
		require.NoError(t, err)
		gate := int64(500)
		_, _, err = env.DB.ChangeVoucher(ctx, v.ID, db.Edit{Pow: &gate}, now) // recorded; Redis missed it
		require.NoError(t, err)
		require.NoError(t, admit(t, env, v.ID, "a"), "no gate in Redis yet")
		require.Equal(t, 1, owed(t, env))
		require.ErrorIs(t, admit(t, env, v.ID, "b"), rdb.ErrProofRequired)
		off := int64(0)
		_, offCh, err := env.DB.ChangeVoucher(ctx, v.ID, db.Edit{Pow: &off}, now)
		require.NoError(t, err)
		_, err = settle.Changes(ctx, env.RDB, env.DB, []db.VoucherChange{offCh}, now)
		require.NoError(t, err)
		require.NoError(t, admit(t, env, v.ID, "c"), "the gate is off")
		requireNothingOwed(t, env)
	})

	t.Run("changes while the creation is owed", func(t *testing.T) {
		env := testenv.New(t, 4)
		v, _ := newVoucher(t, env, 10)
		_, top, err := env.DB.ChangeVoucher(ctx, v.ID, db.Edit{AddStock: 5}, now)
		require.NoError(t, err)
		_, pause, err := env.DB.SetPaused(ctx, v.ID, true, db.ActorAdmin, now)
		require.NoError(t, err)
		// The gateway applies the top-up and the pause at once: they wait
		// for the creation, owed.
		_, err = settle.Changes(ctx, env.RDB, env.DB, []db.VoucherChange{top, pause}, now)
		require.ErrorIs(t, err, settle.ErrCreationOwed)
		_, found := remaining(t, env, v.ID)
		require.False(t, found)
		require.Equal(t, 3, owed(t, env))
		n, _ := remaining(t, env, v.ID)
		require.EqualValues(t, 15, n, "created with the top-up, once")
		require.ErrorIs(t, admit(t, env, v.ID, "a"), rdb.ErrPaused)
		requireNothingOwed(t, env)
	})
}
