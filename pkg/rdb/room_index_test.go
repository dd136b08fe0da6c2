package rdb_test

import (
	"context"
	"regexp"
	"strconv"
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
		x, err := s.RoomIndex(ctx, nil)
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

// A gateway reads the index once a second: what changed, not the whole
// of it. A read after which nothing was written costs one HMGET a
// partition and shares the partitions' fields with the read before; a
// partition whose field changed (a voucher written, a room put on) is
// read again; one Redis lost and the reaper indexed again is read again
// even if its version came back to the same number.
func TestTheRoomsIndexIsReadByItsChanges(t *testing.T) {
	ctx := context.Background()
	s := testrdb.NewStore(t, nil, 4)
	require.NoError(t, s.MarkAllLoaded(ctx))
	for v := int64(1); v <= 8; v++ {
		require.NoError(t, s.PutVoucher(ctx, rdb.Voucher{ID: v, Stock: 5, PerUserLimit: 1}))
	}
	hgetall := func() int64 { return testrdb.Calls(t, s.Client(), "hgetall") }
	x, err := s.RoomIndex(ctx, nil)
	require.NoError(t, err)
	before := hgetall()
	y, err := s.RoomIndex(ctx, x)
	require.NoError(t, err)
	require.Equal(t, before, hgetall(), "nothing changed: no partition read")
	_, exists, known := y.Of(3)
	require.True(t, exists && known)

	on := "5:0:10000"
	_, _, err = s.ApplyChange(ctx, rdb.Change{ID: 1, VoucherID: 3, Room: &on})
	require.NoError(t, err)
	z, err := s.RoomIndex(ctx, y)
	require.NoError(t, err)
	require.Equal(t, before+1, hgetall(), "one partition changed: it alone is read")
	room, _, _ := z.Of(3)
	require.True(t, room)
	_, _, err = s.ApplyChange(ctx, rdb.Change{ID: 2, VoucherID: 3, AddStock: 1})
	require.NoError(t, err)
	_, err = s.RoomIndex(ctx, z)
	require.NoError(t, err)
	require.Equal(t, before+1, hgetall(), "a change that leaves the room alone leaves the index alone")

	// Redis loses partition 3's index; the reaper indexes it again, its
	// version raised to the number the gateway read before.
	p := s.PartitionOf(3)
	version, err := s.Client().HGet(ctx, rdb.RoomsKey(p), rdb.RoomsVersion).Result()
	require.NoError(t, err)
	require.NoError(t, s.Client().Del(ctx, rdb.RoomsKey(p)).Err())
	require.NoError(t, s.IndexRooms(ctx, []int{p}, []int64{3, 7}))
	require.NoError(t, s.Client().HSet(ctx, rdb.RoomsKey(p), rdb.RoomsVersion, version).Err())
	w, err := s.RoomIndex(ctx, z)
	require.NoError(t, err)
	require.Equal(t, before+2, hgetall(), "a partition indexed again is read again")
	room, exists, known = w.Of(3)
	require.Equal(t, []bool{true, true, true}, []bool{room, exists, known})
}

// The index holds what the live vouchers hold: the trimmer's pruning
// drops the fields of vouchers whose keys expired, in batches, never one
// of a voucher that exists, and raises the version when it drops any.
func TestTheRoomsIndexIsPrunedOfVouchersGone(t *testing.T) {
	ctx := context.Background()
	s := testrdb.NewStore(t, nil, 2)
	require.NoError(t, s.MarkAllLoaded(ctx))
	const n = 300
	for v := int64(1); v <= n; v++ {
		require.NoError(t, s.PutVoucher(ctx, rdb.Voucher{ID: v, Stock: 5, PerUserLimit: 1}))
	}
	for v := int64(1); v <= n; v++ {
		if v%10 != 0 { // nine in ten sales over, their keys expired
			require.NoError(t, s.Client().Del(ctx, s.VoucherKey(v)).Err())
		}
	}
	versions := func() []string {
		var out []string
		for p := range 2 {
			out = append(out, s.Client().HGet(ctx, rdb.RoomsKey(p), rdb.RoomsVersion).Val())
		}
		return out
	}
	before := versions()
	dropped := 0
	for p := range 2 {
		cursor := uint64(0)
		for {
			next, d, err := s.PruneRoomIndex(ctx, p, cursor, 50)
			require.NoError(t, err)
			dropped += d
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	require.Equal(t, n-n/10, dropped)
	require.NotEqual(t, before, versions())
	x, err := s.RoomIndex(ctx, nil)
	require.NoError(t, err)
	for v := int64(1); v <= n; v++ {
		_, exists, known := x.Of(v)
		require.True(t, known)
		require.Equal(t, v%10 == 0, exists, "voucher %d", v)
	}
	fields := int64(0)
	for p := range 2 {
		f, err := s.Client().HLen(ctx, rdb.RoomsKey(p)).Result()
		require.NoError(t, err)
		fields += f
	}
	require.EqualValues(t, n/10+2*2, fields, "the live vouchers, and each partition's mark and version")
}

// BenchmarkRoomIndexRead is what a gateway's read of the rooms' index
// costs Redis (its own CPU, from INFO commandstats, in µs a read), with
// 400,000 vouchers ever created over 8 partitions and 100 live: the whole
// index read each second as before it was pruned and read by its changes
// (unpruned/whole), and now (pruned/changes: the fields of the live
// vouchers, read only where a version changed; nothing did). A gateway
// reads it once a second: µs a read is µs of Redis a second a gateway.
//
//	go test -run '^$' -bench RoomIndexRead -benchtime 20x ./pkg/rdb
func BenchmarkRoomIndexRead(b *testing.B) {
	ctx := context.Background()
	s := testrdb.NewStore(b, nil, 8)
	require.NoError(b, s.MarkAllLoaded(ctx))
	const ever, live = 400_000, 100
	pipe := s.Client().Pipeline()
	for v := int64(1); v <= ever; v++ {
		pipe.HSet(ctx, rdb.RoomsKey(s.PartitionOf(v)), strconv.FormatInt(v, 10), v%2)
		if pipe.Len() == 10_000 {
			_, err := pipe.Exec(ctx)
			require.NoError(b, err)
		}
	}
	_, err := pipe.Exec(ctx)
	require.NoError(b, err)
	for v := int64(ever - live + 1); v <= ever; v++ {
		require.NoError(b, s.PutVoucher(ctx, rdb.Voucher{ID: v, Stock: 5, PerUserLimit: 1}))
	}
	usec := func() float64 {
		info, err := s.Client().Info(ctx, "commandstats").Result()
		require.NoError(b, err)
		total := 0.0
		for _, m := range regexp.MustCompile(`cmdstat_(?:hgetall|hmget):calls=\d+,usec=(\d+)`).FindAllStringSubmatch(info, -1) {
			n, _ := strconv.ParseFloat(m[1], 64)
			total += n
		}
		return total
	}
	read := func(b *testing.B, changes bool) {
		x, err := s.RoomIndex(ctx, nil)
		require.NoError(b, err)
		before := usec()
		b.ResetTimer()
		for range b.N {
			prev := x
			if !changes {
				prev = nil
			}
			if x, err = s.RoomIndex(ctx, prev); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric((usec()-before)/float64(b.N), "redis-µs/read")
	}
	b.Run("unpruned/whole", func(b *testing.B) { read(b, false) })
	for p := range 8 {
		for cursor, first := uint64(0), true; first || cursor != 0; first = false {
			cursor, _, err = s.PruneRoomIndex(ctx, p, cursor, 500)
			require.NoError(b, err)
		}
	}
	b.Run("pruned/whole", func(b *testing.B) { read(b, false) })
	b.Run("pruned/changes", func(b *testing.B) { read(b, true) })
}
