package rdb_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
)

func claimN(s *rdb.Store, v int64, user string, n int64) (admission.Admission, error) {
	return testrdb.Admitter(s).Admit(context.Background(), admission.Claim{VoucherID: v, UserID: user, Now: t0, Day: order.Day(t0, t0.Location()), Quantity: n})
}

// A claim of n units takes n or nothing; the limits count units.
func TestAClaimOfSeveralUnitsIsAllOrNothing(t *testing.T) {
	s := newStore(t, 2)
	ctx := context.Background()
	seedVoucher(t, s, rdb.Voucher{ID: 1, Stock: 10, PerUserLimit: 5, PerUserDailyLimit: 4})

	_, err := claimN(s, 1, "alice", 6)
	require.ErrorIs(t, err, rdb.ErrQuantityAboveLimit, "more than a user may ever hold")
	a, err := claimN(s, 1, "alice", 3)
	require.NoError(t, err)
	_, err = claimN(s, 1, "alice", 2)
	require.ErrorIs(t, err, rdb.ErrDailyLimit, "3 + 2 units is over the daily 4")
	_, err = claimN(s, 1, "alice", 1)
	require.NoError(t, err)
	_, err = claimN(s, 1, "alice", 1)
	require.ErrorIs(t, err, rdb.ErrDailyLimit)
	requireStock(t, s, 1, 6)
	held, err := s.UserCount(ctx, 1, "alice")
	require.NoError(t, err)
	require.EqualValues(t, 4, held)

	// Not enough left for 3: nothing is taken, and a smaller claim still fits.
	_, err = claimN(s, 1, "bob", 4)
	require.NoError(t, err)
	_, err = claimN(s, 1, "carol", 3)
	require.ErrorIs(t, err, rdb.ErrSoldOut, "2 units left, 3 asked")
	requireStock(t, s, 1, 2)
	_, err = claimN(s, 1, "carol", 2)
	require.NoError(t, err)
	requireStock(t, s, 1, 0)

	// The entry carries the quantity; a release gives all of it back, once.
	o, found, err := s.PendingOrder(ctx, a.OrderID)
	require.NoError(t, err)
	require.True(t, found)
	require.EqualValues(t, 3, o.Quantity)
	for range 2 {
		_, err = s.Release(ctx, o, t0)
		require.NoError(t, err)
	}
	requireStock(t, s, 1, 3)
	held, err = s.UserCount(ctx, 1, "alice")
	require.NoError(t, err)
	require.EqualValues(t, 1, held)
}

// Concurrent multi-unit claims never take more units than the stock, nor
// more than a user's limit.
func TestConcurrentMultiUnitClaimsNeverOversell(t *testing.T) {
	s := newStore(t, 1)
	seedVoucher(t, s, rdb.Voucher{ID: 1, Stock: 100, PerUserLimit: 7})
	var mu sync.Mutex
	units := map[string]int64{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				user := string(rune('a' + (g*40+i)%26))
				n := int64(1 + (g+i)%4)
				if _, err := claimN(s, 1, user, n); err == nil {
					mu.Lock()
					units[user] += n
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	var total int64
	for u, n := range units {
		require.LessOrEqual(t, n, int64(7), "user %s", u)
		total += n
	}
	require.LessOrEqual(t, total, int64(100))
	left, _, err := s.RemainingStock(context.Background(), 1)
	require.NoError(t, err)
	require.Equal(t, int64(100), total+left, "units conserved")
}
