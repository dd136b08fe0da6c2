package rdb_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// commandCalls is how many times Redis ran cmd (from clients and from
// scripts), summed over the masters of a cluster.
func commandCalls(t *testing.T, s *rdb.Store, cmd string) int64 {
	t.Helper()
	ctx := context.Background()
	var total atomic.Int64 // ForEachMaster runs on every master at once
	count := func(c *redis.Client) error {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
				calls, _, _ := strings.Cut(rest, ",")
				n, err := strconv.ParseInt(calls, 10, 64)
				if err != nil {
					return err
				}
				total.Add(n)
			}
		}
		return nil
	}
	switch c := s.Client().(type) {
	case *redis.ClusterClient:
		require.NoError(t, c.ForEachMaster(ctx, func(_ context.Context, n *redis.Client) error { return count(n) }))
	case *redis.Client:
		require.NoError(t, count(c))
	default:
		t.Fatalf("client %T", c)
	}
	return total.Load()
}

// A user's pending orders were found by reading the
// whole partition stream, 1,000 entries per call, on every GET
// /v1/orders?voucher_id=. They are now found by the user's index: the
// stream entries read are the user's own, however long the backlog.
func TestUserPendingReadsOnlyTheUsersOwnEntries(t *testing.T) {
	s := newStore(t, 1)
	ctx := context.Background()
	seedVoucher(t, s, rdb.Voucher{ID: 1, Stock: 5000, PerUserLimit: 3})
	mine, err := claim(s, 1, "alice", t0)
	require.NoError(t, err)
	for i := range 3000 { // a backlog: the workers are behind
		_, err := claim(s, 1, "u"+strconv.Itoa(i), t0)
		require.NoError(t, err)
	}
	second, err := claim(s, 1, "alice", t0)
	require.NoError(t, err)

	before := commandCalls(t, s, "xrange")
	got, err := s.UserPending(ctx, 1, "alice")
	require.NoError(t, err)
	require.Equal(t, []int64{mine.OrderID, second.OrderID}, orderIDs(got))
	require.Equal(t, int64(3), commandCalls(t, s, "xrange")-before, "the stream's oldest entry, and one entry per order of alice's")
	got, err = s.UserPending(ctx, 1, "nobody")
	require.NoError(t, err)
	require.Empty(t, got)

	// Persisted (acknowledged and deleted): no longer pending, and the
	// index forgets it.
	_, entry, index := order.EntryOf(mine.OrderID)
	require.NoError(t, s.Ack(ctx, 0, []rdb.StreamOrder{{StreamID: entry, Index: index}}))
	got, err = s.UserPending(ctx, 1, "alice")
	require.NoError(t, err)
	require.Equal(t, []int64{second.OrderID}, orderIDs(got))
	before = commandCalls(t, s, "xrange")
	_, err = s.UserPending(ctx, 1, "alice")
	require.NoError(t, err)
	require.Equal(t, int64(2), commandCalls(t, s, "xrange")-before, "the persisted order's id was dropped from the index")
}

// The orders of an index older than the stream's oldest entry have left
// it (persisted, or dead-lettered): they are dropped without reading an
// entry each, which is what the sweep spent most of its Redis time on.
func TestAnIndexBeforeTheStreamsOldestEntryIsDroppedUnread(t *testing.T) {
	s := newStore(t, 1)
	ctx := context.Background()
	seedVoucher(t, s, rdb.Voucher{ID: 2, Stock: 100, PerUserLimit: 3})
	var acks []rdb.StreamOrder
	for range 3 {
		a, err := claim(s, 2, "bob", t0)
		require.NoError(t, err)
		_, entry, index := order.EntryOf(a.OrderID)
		acks = append(acks, rdb.StreamOrder{StreamID: entry, Index: index})
	}
	carol, err := claim(s, 2, "carol", t0)
	require.NoError(t, err)
	require.NoError(t, s.Ack(ctx, 0, acks))

	before := commandCalls(t, s, "xrange")
	got, err := s.UserPending(ctx, 2, "bob")
	require.NoError(t, err)
	require.Empty(t, got)
	require.Equal(t, int64(1), commandCalls(t, s, "xrange")-before, "the stream's oldest entry only")
	got, err = s.UserPending(ctx, 2, "carol")
	require.NoError(t, err)
	require.Equal(t, []int64{carol.OrderID}, orderIDs(got))
}

// A bug: on a hot voucher (stock_buckets > 1) a user's orders go
// to the stream of the user's bucket, but UserPending read only the
// voucher's home partition, so pending orders of users outside bucket 0
// were not listed.
func TestUserPendingFindsOrdersInEveryBucket(t *testing.T) {
	s := newStore(t, 4)
	ctx := context.Background()
	seedVoucher(t, s, rdb.Voucher{ID: 9, Stock: 40, PerUserLimit: 2, Buckets: 4})
	for b := range 4 {
		u := usersIn(b, 4, 1)[0]
		a1, err := claim(s, 9, u, t0)
		require.NoError(t, err)
		a2, err := claim(s, 9, u, t0)
		require.NoError(t, err)
		got, err := s.UserPending(ctx, 9, u)
		require.NoError(t, err)
		require.Equal(t, []int64{a1.OrderID, a2.OrderID}, orderIDs(got), "bucket %d", b)
		for _, o := range got {
			require.Equal(t, u, o.UserID)
			require.EqualValues(t, 9, o.VoucherID)
		}
	}

	// The backlog of the voucher counts every bucket's stream, and so does
	// "is anything of it in flight" (it read only the home partition too).
	backlog, err := s.VoucherBacklog(ctx, 9)
	require.NoError(t, err)
	require.Len(t, backlog, 4, "one stream per bucket's partition")
	var length int64
	for _, b := range backlog {
		require.EqualValues(t, 2, b.Length, "partition %d", b.Partition)
		length += b.Length
	}
	require.EqualValues(t, 8, length)
	require.Equal(t, s.PartitionOf(9), backlog[0].Partition, "home first")
	busy, err := s.InFlight(ctx, 9)
	require.NoError(t, err)
	require.True(t, busy)
	parts, err := s.ReadVoucherPartitions(ctx, 9)
	require.NoError(t, err)
	for i, p := range parts { // the home partition first
		es, err := s.ReadGroup(ctx, p, "w", ">", 100, 0)
		require.NoError(t, err)
		require.NoError(t, s.Ack(ctx, p, es))
		if i == 0 {
			busy, err = s.InFlight(ctx, 9)
			require.NoError(t, err)
			require.True(t, busy, "the other buckets' orders are still in flight")
		}
	}
	busy, err = s.InFlight(ctx, 9)
	require.NoError(t, err)
	require.False(t, busy, "every bucket's orders persisted")
}

func orderIDs(os []order.Order) []int64 {
	out := []int64{}
	for _, o := range os {
		out = append(out, o.ID)
	}
	return out
}
