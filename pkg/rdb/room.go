package rdb

// A waiting room's Redis calls (pkg/room decides what they mean): the
// room's script, the size of its waiters' hash, and what it keeps for the
// report.

import (
	"context"
	"errors"
	"fmt"
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
