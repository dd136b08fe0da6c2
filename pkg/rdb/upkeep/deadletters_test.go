package upkeep_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/wait"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/upkeep"
)

// Dead letters stay until the operator trims them, oldest first.
func TestDeadLettersAreTrimmedOnlyWhenAsked(t *testing.T) {
	s := newStore(t, 1)
	ctx := context.Background()
	seedVoucher(t, s, rdb.Voucher{ID: 1, Stock: 5, PerUserLimit: 5})
	for range 3 {
		_, err := claim(s, 1, "u", time.Now())
		require.NoError(t, err)
	}
	entries, err := s.ReadGroup(ctx, 0, "w", ">", 10, time.Millisecond)
	require.NoError(t, err)
	require.Len(t, entries, 3)
	require.NoError(t, s.DeadLetter(ctx, entries[0], "test"))
	require.NoError(t, s.DeadLetter(ctx, entries[1], "test"))
	// The third is dead-lettered in a later millisecond than the second.
	dead, err := s.Client().XRange(ctx, rdb.DeadKey(0), "-", "+").Result()
	require.NoError(t, err)
	secondMs, err := strconv.ParseInt(strings.Split(dead[1].ID, "-")[0], 10, 64)
	require.NoError(t, err)
	wait.For(t, 5*time.Second, "the clock past the second's millisecond", func() bool { return time.Now().UnixMilli() > secondMs })
	require.NoError(t, s.DeadLetter(ctx, entries[2], "test"))
	cut := time.UnixMilli(secondMs + 1)

	u := upkeep.New(s)
	st, err := u.DeadLetterStats(ctx, 0)
	require.NoError(t, err)
	require.EqualValues(t, 3, st.Count)
	require.False(t, st.Oldest.IsZero())
	n, err := u.TrimDeadLetters(ctx, 0, cut)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	st, err = u.DeadLetterStats(ctx, 0)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Count)
}
