package db_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
)

// The events reader against a plain model of the sequence: rows of 1 to
// 1,000 events, sequenced in turns, the oldest deleted by the retention
// deleter in random runs, and random reads. Whatever after is (before
// the first kept, inside a row, at a row's end, past the last) and
// whatever the limit, Events answers exactly the kept sequences after
// after, at most limit; paging from any after reaches every kept event;
// OldestAfter and EventsState agree with the same model.
func TestTheEventsReaderAgreesWithAModel(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	var (
		kept  []int64 // the model: the sequences kept, in order
		last  int64   // the last sequence given
		order int64   = 1
		rows  []int64 // each written row's size, not yet sequenced
	)
	size := func() int { // rows of one event (a payment) as often as a worker's batches
		switch rng.IntN(3) {
		case 0:
			return 1
		case 1:
			return 1 + rng.IntN(5)
		default:
			return 1 + rng.IntN(db.MaxEventsPerRow)
		}
	}
	check := func(after int64, limit int) {
		t.Helper()
		got, err := e.DB.Events(ctx, after, limit)
		require.NoError(t, err)
		seqs := make([]int64, len(got))
		for i, ev := range got {
			seqs[i] = ev.Sequence
		}
		i, _ := slices.BinarySearch(kept, after+1)
		want := kept[i:min(i+limit, len(kept))]
		require.Equal(t, want, seqs, "Events(after %d, limit %d), kept %d to %d (seed %d)", after, limit, first(kept), last, seed)
		oldest, err := e.DB.OldestAfter(ctx, after)
		require.NoError(t, err)
		require.Equal(t, len(want) > 0, oldest != nil, "OldestAfter(%d) (seed %d)", after, seed)
	}
	for round := range 6 {
		for range 2 + rng.IntN(6) {
			n := size()
			require.NoError(t, e.DB.WriteEventRow(ctx, order, n))
			order += int64(n)
			rows = append(rows, int64(n))
		}
		for len(rows) > 0 {
			n, err := e.DB.SequenceEvents(ctx, 1+rng.IntN(3))
			require.NoError(t, err)
			require.Positive(t, n)
			for n > 0 {
				for s := range rows[0] {
					kept = append(kept, last+1+s)
				}
				last += rows[0]
				n -= int(rows[0])
				rows = rows[1:]
			}
			require.Zero(t, n, "a row is sequenced whole")
		}
		if round > 0 && rng.IntN(3) > 0 { // the retention deletes a run of the oldest rows
			deleted, err := e.DB.DeleteEventsBefore(ctx, time.Now().Add(time.Hour), 1+rng.IntN(3))
			require.NoError(t, err)
			kept = kept[deleted:]
		}
		st, err := e.DB.EventsState(ctx)
		require.NoError(t, err)
		require.Equal(t, first(kept), st.First)
		require.Equal(t, last, st.Last)

		// The edges, then random reads.
		edges := []int64{0, 1, first(kept) - 1, first(kept), last - 1, last, last + 1, last + 5000}
		for _, after := range edges {
			for _, limit := range []int{1, 2, 1000} {
				check(max(after, 0), limit)
			}
		}
		for range 150 {
			check(rng.Int64N(last+3), 1+rng.IntN(1000))
		}
		// Paging at limit 1 and at a random limit from 0 reaches every
		// kept event, once each, in order.
		for _, limit := range []int{1, 1 + rng.IntN(50)} {
			if limit == 1 && len(kept) > 3000 {
				continue // a page an event is the slowest: done while the outbox is small
			}
			var paged []int64
			after := int64(0)
			for {
				page, err := e.DB.Events(ctx, after, limit)
				require.NoError(t, err)
				if len(page) == 0 {
					break
				}
				for _, ev := range page {
					paged = append(paged, ev.Sequence)
				}
				after = page[len(page)-1].Sequence
			}
			require.Equal(t, kept, nonNilSeqs(paged), "paging at limit %d (seed %d)", limit, seed)
		}
	}
}

func first(kept []int64) int64 {
	if len(kept) == 0 {
		return 0
	}
	return kept[0]
}

func nonNilSeqs(s []int64) []int64 {
	if s == nil {
		return []int64{}
	}
	return s
}

// "reaper events redeliver --after": an after before the first kept
// starts the sink at the first kept and says so; an after past the last
// published is refused, the sink left where it was.
func TestRedeliverSinkSaysWhatItSends(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	for i, n := range []int{5, 1, 3} {
		require.NoError(t, e.DB.WriteEventRow(ctx, int64(100*i+1), n))
	}
	_, err := e.DB.SequenceEvents(ctx, 10)
	require.NoError(t, err)
	_, held, err := e.DB.HoldSink(ctx, "kafka", "r/1", time.Minute)
	require.NoError(t, err)
	require.True(t, held)
	deleted, err := e.DB.DeleteEventsBefore(ctx, time.Now().Add(time.Hour), 2)
	require.NoError(t, err)
	require.Equal(t, 6, deleted)

	first, last, err := e.DB.RedeliverSink(ctx, "kafka", 0)
	require.NoError(t, err)
	require.Equal(t, [2]int64{7, 9}, [2]int64{first, last}, "1-6 deleted: it starts at 7")
	first, _, err = e.DB.RedeliverSink(ctx, "kafka", 7)
	require.NoError(t, err)
	require.EqualValues(t, 8, first)
	first, _, err = e.DB.RedeliverSink(ctx, "kafka", 9)
	require.NoError(t, err)
	require.Zero(t, first, "nothing after the last: the events to come")
	_, _, err = e.DB.RedeliverSink(ctx, "kafka", 10)
	require.ErrorIs(t, err, db.ErrAfterPastLast)
	st, _, err := e.DB.HoldSink(ctx, "kafka", "r/1", time.Minute)
	require.NoError(t, err)
	require.EqualValues(t, 9, st.DeliveredUpto, "a refused redeliver leaves the sink where it was")
	_, _, err = e.DB.RedeliverSink(ctx, "nosuch", 0)
	require.ErrorIs(t, err, db.ErrNoSink)
}
