package rdb

// A waiting room's Redis calls (pkg/room decides what they mean): the
// room's script, and the size of its waiters' hash.

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
	res, err := lua.Room.Run(ctx, s.c, []string{vkey, state, waiters, proofKey, s.loaded[s.PartitionOf(v)]}, args...).Slice()
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

// RoomStory reads what voucher v's room keeps for the sale's report: its
// state hash (with its j: and a: series; empty when it never had a
// room), the voucher's start (unix ms, 0 none), and the places whose pass
// bought (the voucher hash's rx: fields, scanned).
func (s *Store) RoomStory(ctx context.Context, v int64) (state map[string]string, startMs int64, bought []int64, err error) {
	vkey := s.VoucherKey(v)
	st, _ := s.RoomKeys(v)
	if state, err = s.c.HGetAll(ctx, st).Result(); err != nil || len(state) == 0 {
		return state, 0, nil, err
	}
	if startMs, err = s.c.HGet(ctx, vkey, "start_ms").Int64(); errors.Is(err, redis.Nil) {
		err = nil
	}
	if err != nil {
		return nil, 0, nil, err
	}
	var cursor uint64
	for {
		var kv []string
		if kv, cursor, err = s.c.HScan(ctx, vkey, cursor, "rx:*", 1000).Result(); err != nil {
			return nil, 0, nil, err
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if n, perr := strconv.ParseInt(strings.TrimPrefix(kv[i], "rx:"), 10, 64); perr == nil {
				bought = append(bought, n)
			}
		}
		if cursor == 0 {
			return state, startMs, bought, nil
		}
	}
}
