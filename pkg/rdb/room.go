package rdb

// A waiting room's Redis calls (pkg/room decides what they mean): the
// room's script, the size of its waiters' hash, and what it keeps for the
// report.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/lua"
)

// RoomKeys are the keys of voucher v's waiting room: its state hash and
// its waiters' hash (a room lives in the voucher's bucket 0, since a
// voucher with a room has one bucket).
func (s *Store) RoomKeys(v int64) (state, waiters string) {
	state = RoomKey(s.VoucherKey(v))
	return state, RoomWaitersKey(state)
}

// RunRoom runs room.lua for voucher v with the join's proof (zero: none)
// and the script's other arguments (ARGV[1..4] and ARGV[7..]; the proof's
// two are filled in here), and returns its reply.
func (s *Store) RunRoom(ctx context.Context, v int64, proof Proof, now int64, op, user, seed string, rest ...any) ([]any, error) {
	vkey := s.VoucherKey(v)
	state, waiters := s.RoomKeys(v)
	proofKey, proofMax, proofTTL := proof.Args(vkey)
	args := append([]any{now, op, user, seed, proofMax, proofTTL}, rest...)
	keys := []string{vkey, state, waiters, proofKey, s.loaded[s.PartitionOf(v)], RoomToldKey(state)}
	res, err := lua.Room.Run(ctx, s.c, keys, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("room %d: %w", v, err)
	}
	return res, nil
}

// RoomWaiters is how many users hold a place in v's room, and the memory
// Redis uses for them (MEMORY USAGE of the waiters' hash, sampled).
func (s *Store) RoomWaiters(ctx context.Context, v int64) (n, bytes int64, err error) {
	_, waiters := s.RoomKeys(v)
	if n, err = s.c.HLen(ctx, waiters).Result(); err != nil {
		return 0, 0, err
	}
	bytes, err = s.c.MemoryUsage(ctx, waiters, 0).Result()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	return n, bytes, err
}

// RoomRecord is what a voucher's room keeps for the sale's report.
type RoomRecord struct {
	State   map[string]string // the room's state hash, with its j: and a: series; empty: it never had a room
	StartMs int64             // the voucher's start, unix ms (0: none)
	EndMs   int64             // its end, unix ms (0: none)
	Stock   int64             // units left in Redis
	Bought  []int64           // the places whose pass bought (the voucher hash's rx: fields)
	Told    []byte            // the bitmap of places told how the sale ended (RoomToldKey)
}

// RoomStory reads what voucher v's room keeps for the sale's report.
func (s *Store) RoomStory(ctx context.Context, v int64) (*RoomRecord, error) {
	vkey := s.VoucherKey(v)
	st, _ := s.RoomKeys(v)
	rec := &RoomRecord{}
	var err error
	if rec.State, err = s.c.HGetAll(ctx, st).Result(); err != nil || len(rec.State) == 0 {
		return rec, err
	}
	vals, err := s.c.HMGet(ctx, vkey, "start_ms", "end_ms", "stock").Result()
	if err != nil {
		return nil, err
	}
	for i, p := range []*int64{&rec.StartMs, &rec.EndMs, &rec.Stock} {
		if str, ok := vals[i].(string); ok {
			*p, _ = strconv.ParseInt(str, 10, 64)
		}
	}
	if rec.Told, err = s.c.Get(ctx, RoomToldKey(st)).Bytes(); errors.Is(err, redis.Nil) {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	var cursor uint64
	for {
		var kv []string
		if kv, cursor, err = s.c.HScan(ctx, vkey, cursor, "rx:*", 1000).Result(); err != nil {
			return nil, err
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if n, perr := strconv.ParseInt(strings.TrimPrefix(kv[i], "rx:"), 10, 64); perr == nil {
				rec.Bought = append(rec.Bought, n)
			}
		}
		if cursor == 0 {
			return rec, nil
		}
	}
}

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
