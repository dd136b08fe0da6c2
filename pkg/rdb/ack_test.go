package rdb_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/rdb"
)

// ack.lua trims below the oldest pending entry and deletes one by one only
// what was acknowledged ahead of it. Whatever the order workers read and
// acknowledge in (several consumers, batches across listpack nodes, some
// acknowledged in parts), the stream holds exactly the entries not yet
// acknowledged: delivered and pending, or not yet delivered.
func TestAckLeavesExactlyTheUnacknowledgedEntries(t *testing.T) {
	s := newStore(t, 1)
	ctx := context.Background()
	c := s.Client()
	key := rdb.StreamKey(0)
	rng := rand.New(rand.NewPCG(18, 2026))
	live := map[string]bool{}       // in the stream, not acknowledged
	held := map[string][][]string{} // each consumer's batches not yet acknowledged
	consumers := []string{"a", "b", "c"}
	add := func(n int) {
		for range n {
			id, err := c.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{"voucher_id", "1"}}).Result()
			require.NoError(t, err)
			live[id] = true
		}
	}
	check := func(step int) {
		t.Helper()
		msgs, err := c.XRange(ctx, key, "-", "+").Result()
		require.NoError(t, err)
		got := make([]string, len(msgs))
		for i, m := range msgs {
			got[i] = m.ID
		}
		want := make([]string, 0, len(live))
		for id := range live {
			want = append(want, id)
		}
		require.ElementsMatch(t, want, got, "step %d", step)
	}
	acks := 0
	for step := range 400 {
		switch r := rng.IntN(10); {
		case r < 3:
			add(1 + rng.IntN(60))
		case r < 6:
			who := consumers[rng.IntN(len(consumers))]
			es, err := s.ReadGroup(ctx, 0, who, ">", 1+rng.IntN(120), -1)
			require.NoError(t, err)
			if len(es) > 0 {
				ids := make([]string, len(es))
				for i, e := range es {
					ids[i] = e.StreamID
				}
				held[who] = append(held[who], ids)
			}
		default:
			who := consumers[rng.IntN(len(consumers))]
			if len(held[who]) == 0 {
				continue
			}
			// Mostly the oldest batch, sometimes a later one, sometimes half.
			i := 0
			if rng.IntN(3) == 0 {
				i = rng.IntN(len(held[who]))
			}
			batch := held[who][i]
			n := len(batch)
			if n > 1 && rng.IntN(4) == 0 {
				n /= 2
			}
			require.NoError(t, s.Ack(ctx, 0, entriesOf(batch[:n])))
			for _, id := range batch[:n] {
				delete(live, id)
			}
			if n < len(batch) {
				held[who][i] = batch[n:]
			} else {
				held[who] = slices.Delete(held[who], i, i+1)
			}
			acks++
			check(step)
		}
	}
	require.Greater(t, acks, 50, "the walk acknowledged")
	// Everything delivered acknowledged: only what no worker read is left.
	for _, who := range consumers {
		for _, batch := range held[who] {
			require.NoError(t, s.Ack(ctx, 0, entriesOf(batch)))
			for _, id := range batch {
				delete(live, id)
			}
		}
	}
	check(-1)
	undelivered, err := s.ReadGroup(ctx, 0, "a", ">", 100_000, -1)
	require.NoError(t, err)
	require.Len(t, undelivered, len(live))
}

// The point of the trim: batches acknowledged in the order they were read
// are removed without one XDEL; only a batch acknowledged ahead of an older
// one still pending pays for deleting its entries one by one.
func TestAckInReadOrderTrimsWithoutDeletingOneByOne(t *testing.T) {
	s := newStore(t, 1)
	ctx := context.Background()
	for range 450 {
		require.NoError(t, s.Client().XAdd(ctx, &redis.XAddArgs{Stream: rdb.StreamKey(0), Values: []any{"voucher_id", "1"}}).Err())
	}
	read := func(who string) []string {
		es, err := s.ReadGroup(ctx, 0, who, ">", 150, -1)
		require.NoError(t, err)
		ids := make([]string, len(es))
		for i, e := range es {
			ids[i] = e.StreamID
		}
		return ids
	}
	a, b, c := read("a"), read("b"), read("a")
	xdel := commandCalls(t, s, "xdel")
	require.NoError(t, s.Ack(ctx, 0, entriesOf(a)))
	require.NoError(t, s.Ack(ctx, 0, entriesOf(b)))
	require.Equal(t, int64(0), commandCalls(t, s, "xdel")-xdel, "in read order: trimmed")
	backlog, err := s.PartitionBacklog(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, rdb.Backlog{Partition: 0, Length: 150, Pending: 150}, backlog, "c's batch")

	// Ahead of an older batch: deleted one by one, still gone at once.
	require.NoError(t, s.Client().XAdd(ctx, &redis.XAddArgs{Stream: rdb.StreamKey(0), Values: []any{"voucher_id", "1"}}).Err())
	late := read("b")
	require.Len(t, late, 1)
	require.NoError(t, s.Ack(ctx, 0, entriesOf(late)))
	require.Equal(t, int64(1), commandCalls(t, s, "xdel")-xdel, "acknowledged ahead of c's batch")
	require.NoError(t, s.Ack(ctx, 0, entriesOf(c)))
	backlog, err = s.PartitionBacklog(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, rdb.Backlog{Partition: 0}, backlog)
}

// entriesOf are stream entries ids as a consumer read them, holding no
// order (the entries these tests add by hand).
func entriesOf(ids []string) []rdb.StreamOrder {
	es := make([]rdb.StreamOrder, len(ids))
	for i, id := range ids {
		es[i] = rdb.StreamOrder{StreamID: id, Index: -1}
	}
	return es
}
