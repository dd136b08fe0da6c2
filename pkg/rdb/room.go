package rdb

// The rooms' indexes (RoomsKey): which vouchers have a waiting room, read
// by the gateways and kept whole by the reaper. A room's own calls (its
// script, its waiters, its report) are pkg/room's.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/lua"
)

// RoomIndex is what the partitions' rooms' indexes (RoomsKey) said when
// read: which vouchers have a waiting room, which have none, and which
// ids no voucher has, where a partition's index is complete. It is never
// changed once read: a later read shares the partitions that did not
// change.
type RoomIndex struct {
	partitions int
	stamps     []string         // by partition: its mark and version when read ("" not complete)
	rooms      []map[int64]bool // by partition: voucher id -> it has a room
}

// RoomIndex reads the partitions' rooms' indexes: each one's mark and
// version (one HMGET a partition, in one pipeline), then, in a second
// pipeline, the fields of those whose mark or version differs from
// prev's (nil: every one). An index nothing changed in costs a gateway
// one HMGET a partition a read.
func (s *Store) RoomIndex(ctx context.Context, prev *RoomIndex) (*RoomIndex, error) {
	pipe := s.c.Pipeline()
	marks := make([]*redis.SliceCmd, s.partitions)
	for p := range s.partitions {
		marks[p] = pipe.HMGet(ctx, RoomsKey(p), roomsComplete, RoomsVersion)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("read the rooms' indexes' versions: %w", err)
	}
	x := &RoomIndex{partitions: s.partitions, stamps: make([]string, s.partitions), rooms: make([]map[int64]bool, s.partitions)}
	if prev != nil && prev.partitions != s.partitions {
		prev = nil
	}
	pipe = s.c.Pipeline()
	reads := make([]*redis.MapStringStringCmd, s.partitions)
	for p, m := range marks {
		vals := m.Val()
		mark, _ := vals[0].(string)
		version, _ := vals[1].(string)
		switch {
		case mark == "": // not complete: nothing to read
		case prev != nil && prev.stamps[p] == roomsStamp(mark, version):
			x.stamps[p], x.rooms[p] = prev.stamps[p], prev.rooms[p]
		default:
			reads[p] = pipe.HGetAll(ctx, RoomsKey(p))
		}
	}
	if pipe.Len() == 0 {
		return x, nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("read the rooms' indexes: %w", err)
	}
	for p, c := range reads {
		if c == nil {
			continue
		}
		fields := c.Val()
		if fields[roomsComplete] == "" {
			continue // lost since its mark was read
		}
		x.stamps[p] = roomsStamp(fields[roomsComplete], fields[RoomsVersion])
		rooms := make(map[int64]bool, len(fields))
		for k, val := range fields {
			if v, err := strconv.ParseInt(k, 10, 64); err == nil {
				rooms[v] = val == "1"
			}
		}
		x.rooms[p] = rooms
	}
	return x, nil
}

func roomsStamp(mark, version string) string { return mark + "/" + version }

// Of says what the index knows of voucher v: known is false when v's
// partition's index is not complete (ask Redis); otherwise exists says
// whether Redis holds voucher v and room whether it has a waiting room.
// A nil index knows nothing.
func (x *RoomIndex) Of(v int64) (room, exists, known bool) {
	if x == nil || v < 0 {
		return false, false, false
	}
	p := int(uint64(v) % uint64(x.partitions))
	if x.stamps[p] == "" {
		return false, false, false
	}
	room, exists = x.rooms[p][v]
	return room, exists, true
}

// PruneRoomIndex drops from partition p's rooms' index the fields, among
// about count from cursor on (HSCAN), of vouchers Redis no longer holds
// (prunerooms.lua: their keys expired after the sale); it returns the
// cursor to go on from (0: the index was gone through) and the fields
// dropped.
func (s *Store) PruneRoomIndex(ctx context.Context, p int, cursor uint64, count int64) (next uint64, dropped int, err error) {
	kv, next, err := s.c.HScan(ctx, RoomsKey(p), cursor, "", count).Result()
	if err != nil {
		return cursor, 0, fmt.Errorf("scan the rooms' index of partition %d: %w", p, err)
	}
	keys := []string{RoomsKey(p)}
	var ids []any
	for i := 0; i < len(kv); i += 2 { // field, value (HSCAN NOVALUES is Redis 7.4's)
		f := kv[i]
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil || s.bucketOf(v, 0).P != p {
			continue // its mark, its version
		}
		keys = append(keys, s.VoucherKey(v))
		ids = append(ids, f)
	}
	if len(ids) == 0 {
		return next, 0, nil
	}
	n, err := lua.PruneRooms.Run(ctx, s.c, keys, ids...).Int()
	if err != nil {
		return cursor, 0, fmt.Errorf("prune the rooms' index of partition %d: %w", p, err)
	}
	return next, n, nil
}

// UnindexedRooms lists the partitions whose rooms' index is not complete
// (RoomsKey has no field *): Redis lost it, or it was written by a
// version without it.
func (s *Store) UnindexedRooms(ctx context.Context) ([]int, error) {
	pipe := s.c.Pipeline()
	cmds := make([]*redis.StringCmd, s.partitions)
	for p := range s.partitions {
		cmds[p] = pipe.HGet(ctx, RoomsKey(p), roomsComplete)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read the rooms' indexes' marks: %w", err)
	}
	var out []int
	for p, c := range cmds {
		if errors.Is(c.Err(), redis.Nil) {
			out = append(out, p)
		}
	}
	return out, nil
}

// IndexRooms completes the rooms' indexes of partitions: each voucher of
// vouchers in one of them that Redis holds and its index does not name is
// named with what its hash says (HSETNX: what change.lua or a voucher's
// writing recorded meanwhile is newer, and kept), then each partition's
// index is marked complete.
func (s *Store) IndexRooms(ctx context.Context, partitions []int, vouchers []int64) error {
	var mine []int64
	for _, v := range vouchers {
		if slices.Contains(partitions, s.PartitionOf(v)) {
			mine = append(mine, v)
		}
	}
	pipe := s.c.Pipeline()
	rooms := make([]*redis.StringCmd, len(mine))
	for i, v := range mine {
		rooms[i] = pipe.HGet(ctx, s.bucketOf(v, 0).Key(), "room")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("read the vouchers' rooms: %w", err)
	}
	pipe = s.c.Pipeline()
	for i, v := range mine {
		rate, err := rooms[i].Int64()
		if errors.Is(err, redis.Nil) { // not in Redis: indexed when it is written
			continue
		}
		pipe.HSetNX(ctx, RoomsKey(s.PartitionOf(v)), strconv.FormatInt(v, 10), bit(rate > 0))
	}
	for _, p := range partitions {
		// A mark of its own: a gateway that read the index before Redis
		// lost it never takes this one for the one it read.
		pipe.HSet(ctx, RoomsKey(p), roomsComplete, strconv.FormatUint(rand.Uint64()|1, 36))
		pipe.HIncrBy(ctx, RoomsKey(p), RoomsVersion, 1)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("index the vouchers' rooms: %w", err)
	}
	return nil
}
