package rdb_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// The rooms' index says, for every voucher Redis holds, whether it has a
// waiting room, written with the voucher's hash (put, created, a change
// putting a room on or taking it away); an index written by a version
// without it (or lost) is incomplete until IndexRooms completes it from
// the vouchers' hashes, keeping what was written meanwhile.
func TestTheRoomsIndexFollowsTheVouchers(t *testing.T) {
	ctx := context.Background()
	s := testrdb.NewStore(t, nil, 4)
	of := func(v int64) (room, exists, known bool) {
		t.Helper()
		x, err := s.RoomIndex(ctx)
		require.NoError(t, err)
		return x.Of(v)
	}
	require.NoError(t, s.PutVoucher(ctx, rdb.Voucher{ID: 1, Stock: 5, PerUserLimit: 1}))
	created, err := s.CreateVoucher(ctx, rdb.Voucher{ID: 2, Stock: 5, PerUserLimit: 1, Buckets: 3, Room: "10:0:30000"}, nil)
	require.NoError(t, err)
	require.True(t, created)
	room, exists, known := of(1)
	require.Equal(t, []bool{false, true, true}, []bool{room, exists, known}, "voucher 1: no room")
	room, exists, known = of(2)
	require.Equal(t, []bool{true, true, true}, []bool{room, exists, known}, "voucher 2: a room")
	room, exists, known = of(3)
	require.Equal(t, []bool{false, false, true}, []bool{room, exists, known}, "no voucher 3")
	x, err := s.RoomIndex(ctx)
	require.NoError(t, err)
	require.True(t, x.Above(3))
	require.False(t, x.Above(2))

	on, off := "5:0:10000", "0"
	_, _, err = s.ApplyChange(ctx, rdb.Change{ID: 1, VoucherID: 1, Room: &on})
	require.NoError(t, err)
	_, _, err = s.ApplyChange(ctx, rdb.Change{ID: 2, VoucherID: 2, Room: &off})
	require.NoError(t, err)
	room, _, _ = of(1)
	require.True(t, room, "a room put on")
	room, _, _ = of(2)
	require.False(t, room, "a room taken away")

	// Written by a version without the index: partition 1's is gone.
	require.NoError(t, s.Client().Del(ctx, rdb.RoomsKey(1)).Err())
	_, _, known = of(1)
	require.False(t, known, "an incomplete index says nothing")
	unindexed, err := s.UnindexedRooms(ctx)
	require.NoError(t, err)
	require.Equal(t, []int{1}, unindexed)
	// Meanwhile voucher 5 is written (by this version): indexed at once;
	// the completion does not overwrite it with what it read before.
	require.NoError(t, s.PutVoucher(ctx, rdb.Voucher{ID: 5, Stock: 1, PerUserLimit: 1, Room: "1:0:1000"}))
	require.NoError(t, s.IndexRooms(ctx, unindexed, []int64{1, 2, 5, 9}))
	unindexed, err = s.UnindexedRooms(ctx)
	require.NoError(t, err)
	require.Empty(t, unindexed)
	room, exists, known = of(1)
	require.Equal(t, []bool{true, true, true}, []bool{room, exists, known}, "voucher 1 indexed from its hash")
	room, exists, known = of(5)
	require.Equal(t, []bool{true, true, true}, []bool{room, exists, known}, "voucher 5 as written")
	_, exists, _ = of(9)
	require.False(t, exists, "voucher 9 is not in Redis: not indexed")
}
