package rdb

import (
	"cmp"
	"context"

	"github.com/flashsale/flashsale/lua"
)

// BucketKeys are the voucher hash keys of v's n buckets.
func (s *Store) BucketKeys(v int64, n int) []string {
	out := make([]string, n)
	for b := range n {
		out[b] = s.bucketOf(v, b).Key()
	}
	return out
}

// BucketStocks are the stocks of v's n buckets, moves owed left out.
func (s *Store) BucketStocks(ctx context.Context, v int64, n int) ([]int64, error) {
	st, err := s.readStocks(ctx, v, n)
	return st.stock, err
}

// TakeOnly runs the first half of a move, as a mover that crashes before
// giving leaves it.
func (s *Store) TakeOnly(ctx context.Context, v int64, from, to int, units int64, id string) (int64, error) {
	b := s.bucketOf(v, from)
	return lua.Take.Run(ctx, s.c, []string{b.Key(), b.MovesOut()}, id, to, units, cmp.Or(moveTime(id), "0")).Int64()
}

// GiveOnly runs the second half without forgetting the move at its
// source, as a mover that crashes in between leaves it.
func (s *Store) GiveOnly(ctx context.Context, v int64, to int, units int64, id string) error {
	b := s.bucketOf(v, to)
	return lua.Give.Run(ctx, s.c, []string{b.Key(), b.MovesIn()}, id, units, moveTime(id)).Err()
}

// MovesGiven is how many ids of moves given bucket b of v keeps.
func (s *Store) MovesGiven(ctx context.Context, v int64, b int) (int64, error) {
	return s.c.SCard(ctx, s.bucketOf(v, b).MovesIn()).Result()
}

// AdmitErrors are admit.lua's codes as errors.
func AdmitErrors() map[int64]error { return admitErrors }
