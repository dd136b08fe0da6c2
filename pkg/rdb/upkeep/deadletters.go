package upkeep

// Dead letters: what an operator, and the reaper's requeueing, do with
// the orders the workers moved aside (rdb.Store.DeadLetter).

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/pkg/rdb"
)

// DeadLetterStats describes one partition's dead-letter stream.
type DeadLetterStats struct {
	Partition int       `json:"partition"`
	Count     int64     `json:"count"`
	Oldest    time.Time `json:"oldest,omitzero"` // when the oldest entry was dead-lettered; zero (and absent from JSON) if none
}

// DeadLetterStats reads partition p's dead-letter stream's length and age.
func (u *Streams) DeadLetterStats(ctx context.Context, p int) (DeadLetterStats, error) {
	st := DeadLetterStats{Partition: p}
	var err error
	if st.Count, err = u.client().XLen(ctx, rdb.DeadKey(p)).Result(); err != nil {
		return st, fmt.Errorf("xlen %s: %w", rdb.DeadKey(p), err)
	}
	first, err := u.client().XRangeN(ctx, rdb.DeadKey(p), "-", "+", 1).Result()
	if err != nil {
		return st, fmt.Errorf("xrange %s: %w", rdb.DeadKey(p), err)
	}
	if len(first) == 1 {
		st.Oldest = rdb.ParseDeadLetter(p, first[0]).DeadAt
	}
	return st, nil
}

// TrimDeadLetters deletes partition p's dead letters dead-lettered before
// before (XTRIM MINID) and returns how many went. Dead letters are never
// trimmed on their own: this is the operator's explicit action, after
// reading them (see docs/RUNBOOK.md).
func (u *Streams) TrimDeadLetters(ctx context.Context, p int, before time.Time) (int64, error) {
	n, err := u.client().XTrimMinID(ctx, rdb.DeadKey(p), strconv.FormatInt(before.UnixMilli(), 10)+"-0").Result()
	if err != nil {
		return 0, fmt.Errorf("xtrim %s: %w", rdb.DeadKey(p), err)
	}
	return n, nil
}

// DeadLetters returns partition p's dead letters, oldest first.
func (u *Streams) DeadLetters(ctx context.Context, p int) ([]rdb.DeadEntry, error) {
	var out []rdb.DeadEntry
	err := u.s.ScanStream(ctx, rdb.DeadKey(p), func(msgs []redis.XMessage) bool {
		for _, m := range msgs {
			out = append(out, rdb.ParseDeadLetter(p, m))
		}
		return false
	})
	return out, err
}

// DeleteDeadLetters deletes dead letters ids of partition p.
func (u *Streams) DeleteDeadLetters(ctx context.Context, p int, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	if err := u.client().XDel(ctx, rdb.DeadKey(p), ids...).Err(); err != nil {
		return fmt.Errorf("xdel %s: %w", rdb.DeadKey(p), err)
	}
	return nil
}
