package room

// A room's Redis calls: its script, the size of its waiters' hash, and
// what it keeps for the report. A room lives in its voucher's bucket 0
// (a voucher with a room has one bucket), so every key of a call is in
// that voucher's slot.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/lua"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// Keys are the room's keys of voucher v: its state hash and its
// waiters' hash.
func (s *Store) Keys(v int64) (state, waiters string) {
	state = rdb.RoomKey(s.r.VoucherKey(v))
	return state, rdb.RoomWaitersKey(state)
}

// script runs room.lua for voucher v with the join's proof (zero: none)
// and the script's other arguments (ARGV[1..4] and ARGV[7..]; the proof's
// two are filled in here), and returns its reply.
func (s *Store) script(ctx context.Context, v int64, proof rdb.Proof, now int64, op, user, seed string, rest ...any) ([]any, error) {
	vkey := s.r.VoucherKey(v)
	state, waiters := s.Keys(v)
	proofKey, proofMax, proofTTL := proof.Args(vkey)
	args := append([]any{now, op, user, seed, proofMax, proofTTL}, rest...)
	keys := []string{vkey, state, waiters, proofKey, rdb.LoadedKey(s.r.PartitionOf(v)), rdb.RoomToldKey(state)}
	res, err := lua.Room.Run(ctx, s.r.Client(), keys, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("room %d: %w", v, err)
	}
	return res, nil
}

// Waiters is how many users hold a place in v's room, and the memory
// Redis uses for them (MEMORY USAGE of the waiters' hash, sampled).
func (s *Store) Waiters(ctx context.Context, v int64) (n, bytes int64, err error) {
	_, waiters := s.Keys(v)
	c := s.r.Client()
	if n, err = c.HLen(ctx, waiters).Result(); err != nil {
		return 0, 0, err
	}
	bytes, err = c.MemoryUsage(ctx, waiters, 0).Result()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	return n, bytes, err
}

// record is what a voucher's room keeps for the sale's report.
type record struct {
	State   map[string]string // the room's state hash, with its j: and a: series; empty: it never had a room
	StartMs int64             // the voucher's start, unix ms (0: none)
	EndMs   int64             // its end, unix ms (0: none)
	Stock   int64             // units left in Redis
	Bought  []int64           // the places whose pass bought (the voucher hash's rx: fields)
	Told    []byte            // the bitmap of places told how the sale ended (rdb.RoomToldKey)
}

// readRecord reads what voucher v's room keeps for the sale's report.
func (s *Store) readRecord(ctx context.Context, v int64) (*record, error) {
	c := s.r.Client()
	vkey := s.r.VoucherKey(v)
	st, _ := s.Keys(v)
	rec := &record{}
	var err error
	if rec.State, err = c.HGetAll(ctx, st).Result(); err != nil || len(rec.State) == 0 {
		return rec, err
	}
	vals, err := c.HMGet(ctx, vkey, "start_ms", "end_ms", "stock").Result()
	if err != nil {
		return nil, err
	}
	for i, p := range []*int64{&rec.StartMs, &rec.EndMs, &rec.Stock} {
		if str, ok := vals[i].(string); ok {
			*p, _ = strconv.ParseInt(str, 10, 64)
		}
	}
	if rec.Told, err = c.Get(ctx, rdb.RoomToldKey(st)).Bytes(); errors.Is(err, redis.Nil) {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	var cursor uint64
	for {
		var kv []string
		if kv, cursor, err = c.HScan(ctx, vkey, cursor, "rx:*", 1000).Result(); err != nil {
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
