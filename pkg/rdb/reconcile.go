package rdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/pkg/order"
)

// VoucherState is a voucher's admission state as Redis holds it.
type VoucherState struct {
	Found        bool
	Voucher      Voucher
	Users        map[string]int64
	Days         map[string]map[string]int64 // day -> user -> count, for the days asked
	ReleasedSize int64
}

// ReadVoucherState reads voucher v's state, with the per-day counts of days.
func (s *Store) ReadVoucherState(ctx context.Context, v int64, days []string) (VoucherState, error) {
	p := s.PartitionOf(v)
	st := VoucherState{Users: map[string]int64{}, Days: map[string]map[string]int64{}}
	h, err := s.c.HGetAll(ctx, voucherKey(p, v)).Result()
	if err != nil {
		return st, fmt.Errorf("read voucher %d: %w", v, err)
	}
	if len(h) > 0 {
		st.Found = true
		num := func(k string) int64 { n, _ := strconv.ParseInt(h[k], 10, 64); return n }
		st.Voucher = Voucher{ID: v, Stock: num("stock"), PerUserLimit: num("limit"), PerUserDailyLimit: num("daily")}
		if ms := num("start_ms"); ms > 0 {
			st.Voucher.StartsAt = time.UnixMilli(ms).UTC()
		}
		if ms := num("end_ms"); ms > 0 {
			st.Voucher.EndsAt = time.UnixMilli(ms).UTC()
		}
		if sec := num("expire_s"); sec > 0 {
			st.Voucher.ExpireAt = time.Unix(sec, 0).UTC()
		}
		st.Voucher.Pooled, st.Voucher.Closed, st.Voucher.Paused = num("pool") == 1, num("closed") == 1, num("paused") == 1
	}
	if st.Voucher.Pooled {
		raw, err := s.c.LRange(ctx, poolKey(p, v), 0, -1).Result()
		if err != nil {
			return st, fmt.Errorf("read pool of voucher %d: %w", v, err)
		}
		st.Voucher.Items = make([]order.Item, 0, len(raw))
		for _, r := range raw {
			it, err := order.ParseItem(r)
			if err != nil {
				return st, fmt.Errorf("pool of voucher %d: %w", v, err)
			}
			st.Voucher.Items = append(st.Voucher.Items, it)
		}
	}
	if st.Users, err = s.intHash(ctx, usersKey(p, v)); err != nil {
		return st, err
	}
	for _, d := range days {
		if st.Days[d], err = s.intHash(ctx, dayKey(p, v, d)); err != nil {
			return st, err
		}
	}
	st.ReleasedSize, err = s.c.SCard(ctx, releasedKey(p, v)).Result()
	return st, err
}

func (s *Store) intHash(ctx context.Context, key string) (map[string]int64, error) {
	h, err := s.c.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("hgetall %s: %w", key, err)
	}
	out := make(map[string]int64, len(h))
	for k, v := range h {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s field %s: %w", key, k, err)
		}
		if n != 0 {
			out[k] = n
		}
	}
	return out, nil
}

// StreamOrders returns every entry of partition p's stream, oldest first,
// reading pageSize entries at a time.
func (s *Store) StreamOrders(ctx context.Context, p int, pageSize int64) ([]Entry, error) {
	var out []Entry
	start := "-"
	for {
		msgs, err := s.c.XRangeN(ctx, StreamKey(p), start, "+", pageSize).Result()
		if err != nil {
			return nil, fmt.Errorf("xrange %s: %w", StreamKey(p), err)
		}
		for _, m := range msgs {
			out = append(out, parseEntry(p, m))
		}
		if int64(len(msgs)) < pageSize {
			return out, nil
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}

// RewriteVoucher replaces voucher v's admission state with st in one
// transaction (MULTI/EXEC): the voucher hash and its pool, the per-user counts, the
// per-day counts of the days in st, adds released to the set of released
// orders and changes to the set of changes applied (st is the truth,
// every change included: none may be applied again).
func (s *Store) RewriteVoucher(ctx context.Context, st VoucherState, released, changes []int64) error {
	v := st.Voucher.ID
	p := s.PartitionOf(v)
	_, err := s.c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		putVoucherHash(ctx, pipe, p, st.Voucher)
		expire := func(key string) { expire(ctx, pipe, key, st.Voucher.ExpireAt) }
		pipe.Del(ctx, usersKey(p, v))
		if len(st.Users) > 0 {
			pipe.HSet(ctx, usersKey(p, v), flatten(st.Users)...)
			expire(usersKey(p, v))
		}
		for d, counts := range st.Days {
			pipe.Del(ctx, dayKey(p, v, d))
			if len(counts) > 0 {
				pipe.HSet(ctx, dayKey(p, v, d), flatten(counts)...)
				pipe.Expire(ctx, dayKey(p, v, d), DayKeyTTL)
			}
		}
		// Orders released and changes applied: none may be again.
		for key, ids := range map[string][]int64{releasedKey(p, v): released, changesKey(p, v): changes} {
			for i := 0; i < len(ids); i += 1000 {
				chunk := ids[i:min(i+1000, len(ids))]
				members := make([]any, len(chunk))
				for j, id := range chunk {
					members[j] = id
				}
				pipe.SAdd(ctx, key, members...)
			}
			if len(ids) > 0 {
				expire(key)
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("rewrite voucher %d: %w", v, err)
	}
	return nil
}

func flatten(m map[string]int64) []any {
	out := make([]any, 0, 2*len(m))
	for k, v := range m {
		out = append(out, k, v)
	}
	return out
}
