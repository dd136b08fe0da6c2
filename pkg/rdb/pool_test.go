package rdb_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
)

func envelopes(amounts ...int64) []order.Item {
	out := make([]order.Item, len(amounts))
	for i, a := range amounts {
		out[i] = order.Item{No: int64(i + 1), Amount: a}
	}
	return out
}

// A grab pops one item of the pool atomically with the limits; the entry
// and a replay carry it; a release puts it back, once.
func TestAPooledAdmissionTakesOneItem(t *testing.T) {
	s := newStore(t, 2)
	ctx := context.Background()
	items := envelopes(30, 50, 20)
	seedVoucher(t, s, rdb.Voucher{ID: 1, Stock: 3, Pooled: true, Items: items})

	a, err := testrdb.Admitter(s).Admit(ctx, admission.Claim{VoucherID: 1, UserID: "alice", Now: t0, Day: d0, IdempotencyKey: "k", IdempotencyTTL: time.Minute})
	require.NoError(t, err)
	require.Equal(t, items[0], a.Item)
	again, err := testrdb.Admitter(s).Admit(ctx, admission.Claim{VoucherID: 1, UserID: "alice", Now: t0, Day: d0, IdempotencyKey: "k", IdempotencyTTL: time.Minute})
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, a, admission.Admission{OrderID: again.OrderID, Item: again.Item}, "a replay answers the same order and item")

	_, err = claim(s, 1, "alice", t0)
	require.ErrorIs(t, err, rdb.ErrUserLimit, "one per user")
	_, err = claimN(s, 1, "bob", 2)
	require.ErrorIs(t, err, rdb.ErrQuantityAboveLimit, "a pool is grabbed one item at a time")
	requireStock(t, s, 1, 2)

	o, found, err := s.PendingOrder(ctx, a.OrderID)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, items[0], o.Item, "the entry carries the item")

	b, err := claim(s, 1, "bob", t0)
	require.NoError(t, err)
	c, err := claim(s, 1, "carol", t0)
	require.NoError(t, err)
	require.Equal(t, []order.Item{items[1], items[2]}, []order.Item{b.Item, c.Item})
	_, err = claim(s, 1, "dave", t0)
	require.ErrorIs(t, err, rdb.ErrSoldOut)

	// Released twice, given back once: dave gets alice's envelope.
	for range 2 {
		_, err = s.Release(ctx, o, t0)
		require.NoError(t, err)
	}
	requireStock(t, s, 1, 1)
	d, err := claim(s, 1, "dave", t0)
	require.NoError(t, err)
	require.Equal(t, items[0], d.Item)
	_, err = claim(s, 1, "erin", t0)
	require.ErrorIs(t, err, rdb.ErrSoldOut)

	st, err := s.ReadVoucherState(ctx, 1, nil)
	require.NoError(t, err)
	require.True(t, st.Voucher.Pooled)
	require.Empty(t, st.Voucher.Items)
}

// Many concurrent grabs of a small pool: every item goes to exactly one
// admission, and the pool and its stock count end empty together.
func TestConcurrentGrabsTakeEachItemOnce(t *testing.T) {
	s := newStore(t, 1)
	const n = 200
	amounts := make([]int64, n)
	for i := range amounts {
		amounts[i] = int64(i + 1)
	}
	seedVoucher(t, s, rdb.Voucher{ID: 9, Stock: n, Pooled: true, Items: envelopes(amounts...)})
	var mu sync.Mutex
	taken := map[int64]string{}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				user := "u" + strconv.Itoa(g*100+i)
				a, err := claim(s, 9, user, t0)
				if err != nil {
					if !errors.Is(err, rdb.ErrSoldOut) {
						t.Error(err)
					}
					continue
				}
				mu.Lock()
				if prev, ok := taken[a.Item.No]; ok {
					t.Errorf("item %d handed out twice: %s and %s", a.Item.No, prev, user)
				}
				taken[a.Item.No] = user
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, taken, n)
	requireStock(t, s, 9, 0)
}

// A closed pool hands out nothing and takes nothing back: the refund
// counted what was left.
func TestAClosedPoolTakesNothingBack(t *testing.T) {
	s := newStore(t, 1)
	ctx := context.Background()
	seedVoucher(t, s, rdb.Voucher{ID: 3, Stock: 2, Pooled: true, Items: envelopes(5, 5)})
	a, err := claim(s, 3, "alice", t0)
	require.NoError(t, err)
	found, err := s.ClosePool(ctx, 3)
	require.NoError(t, err)
	require.True(t, found)
	_, err = s.ClosePool(ctx, 3)
	require.NoError(t, err, "closing twice is harmless")
	found, err = s.ClosePool(ctx, 404)
	require.NoError(t, err)
	require.False(t, found, "a voucher Redis does not hold: nothing to close")
	gone, err := s.ReadVoucherState(ctx, 404, nil)
	require.NoError(t, err)
	require.False(t, gone.Found, "and nothing written")
	_, err = claim(s, 3, "bob", t0)
	require.ErrorIs(t, err, rdb.ErrSoldOut)
	busy, err := s.InFlight(ctx, 3)
	require.NoError(t, err)
	require.True(t, busy, "alice's grab is still in the stream")

	o, _, err := s.PendingOrder(ctx, a.OrderID)
	require.NoError(t, err)
	released, err := s.Release(ctx, o, t0)
	require.NoError(t, err)
	require.True(t, released, "alice's count is given back")
	requireStock(t, s, 3, 0)
	held, err := s.UserCount(ctx, 3, "alice")
	require.NoError(t, err)
	require.Zero(t, held)
	st, err := s.ReadVoucherState(ctx, 3, nil)
	require.NoError(t, err)
	require.True(t, st.Voucher.Closed)
	require.Empty(t, st.Voucher.Items)
}

// A repair that read MySQL before an envelope sale's refund, and its
// clock before the sale's end, writes the pool open with what MySQL had
// left; the refunder closes Redis before it records the refund, so that
// write can come after the close. It must not reopen the pool: MySQL
// then refunds what was left, and Redis would hand it out again (a loaded
// run of TestChaosOnACluster: Redis remaining 1293, MySQL 0).
func TestARewriteNeverReopensAClosedPool(t *testing.T) {
	s := newStore(t, 1)
	ctx := context.Background()
	items := envelopes(5, 5, 5, 5, 5)
	seedVoucher(t, s, rdb.Voucher{ID: 4, Stock: 5, Pooled: true, Items: items})
	st, err := s.ReadVoucherState(ctx, 4, nil) // as MySQL had it before the refund
	require.NoError(t, err)
	require.False(t, st.Voucher.Closed)
	require.Len(t, st.Voucher.Items, 5)

	_, err = s.ClosePool(ctx, 4)
	require.NoError(t, err)
	require.NoError(t, s.RewriteVoucher(ctx, st, nil, nil))
	requireStock(t, s, 4, 0)
	got, err := s.ReadVoucherState(ctx, 4, nil)
	require.NoError(t, err)
	require.True(t, got.Voucher.Closed, "the pool stays closed")
	require.Empty(t, got.Voucher.Items)
	_, err = claim(s, 4, "after", t0)
	require.ErrorIs(t, err, rdb.ErrSoldOut)

	// An open pool is rewritten as asked.
	seedVoucher(t, s, rdb.Voucher{ID: 5, Stock: 5, Pooled: true, Items: items})
	st, err = s.ReadVoucherState(ctx, 5, nil)
	require.NoError(t, err)
	st.Voucher.Stock, st.Voucher.Items = 4, items[1:]
	require.NoError(t, s.RewriteVoucher(ctx, st, nil, nil))
	requireStock(t, s, 5, 4)
}

// With a durability set, the close of a pool returns once the replicas
// have it, or ErrNotReplicated: the refunder records the refund only
// after it. A close acknowledged by a master alone and lost with it in a
// failover left the pool open with what MySQL then refunded (loaded runs
// of TestChaosOnACluster: Redis remaining 1,230 of MySQL's 0).
func TestAPoolIsClosedOnlyOnceTheReplicasHaveIt(t *testing.T) {
	s := newStore(t, 1)
	ctx := context.Background()
	seedVoucher(t, s, rdb.Voucher{ID: 6, Stock: 2, Pooled: true, Items: envelopes(5, 5)})
	require.NoError(t, s.SetDurability(rdb.Durability{Mode: rdb.DurabilityReplica, MinReplicas: 1, Timeout: 20 * time.Millisecond}))
	found, err := s.ClosePool(ctx, 6) // this server has no replica
	require.True(t, found)
	require.ErrorIs(t, err, rdb.ErrNotReplicated)

	require.NoError(t, s.SetDurability(rdb.Durability{Mode: rdb.DurabilityNone}))
	found, err = s.ClosePool(ctx, 6)
	require.NoError(t, err)
	require.True(t, found)
}
