package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
)

// A sink relayed in parts: a reaper alone holds every part; a second
// reaper is given its share, the first holds it until it hands
// it over, then the second holds it; the sink's rows of one part become
// rows of two only when no live lease holds the old, each starting at
// the old place; a reaper leaving gives its parts to the others.
func TestTheReapersShareASinksParts(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	require.NoError(t, e.DB.WriteEventRow(ctx, 1, 7))
	_, err := e.DB.SequenceEvents(ctx, 10)
	require.NoError(t, err)
	hold := func(owner string, part, parts int) db.PartHold {
		t.Helper()
		h, err := e.DB.HoldPart(ctx, "kafka", part, parts, owner, time.Minute, true)
		require.NoError(t, err)
		return h
	}

	// One part, held by "old/1"; a reaper set to two parts waits for it.
	h := hold("old/1", 0, 1)
	require.True(t, h.Held && h.Assigned)
	require.EqualValues(t, 7, h.State.DeliveredUpto, "a new sink starts at the last sequence")
	_, _, err = e.DB.RedeliverSink(ctx, "kafka", 3)
	require.NoError(t, err)
	h = hold("a/1", 0, 2)
	require.False(t, h.Held)
	require.Equal(t, "old/1", h.Waiting, "rows of another number of parts, held: it waits")
	require.NoError(t, e.DB.ReleaseSink(ctx, "kafka", "old/1"))
	require.NoError(t, e.DB.LeaveRelay(ctx, "kafka", "old/1"))

	// Released: the rows become two parts at the old place; "a/1", alone,
	// holds both.
	h = hold("a/1", 0, 2)
	require.True(t, h.Held && h.Assigned)
	require.Equal(t, "kafka#1/2", h.State.Name)
	require.EqualValues(t, 3, h.State.DeliveredUpto, "a part starts at the old place")
	h = hold("a/1", 1, 2)
	require.True(t, h.Held && h.Assigned)
	require.EqualValues(t, 3, h.State.DeliveredUpto)
	states, err := e.DB.SinkStates(ctx)
	require.NoError(t, err)
	require.Len(t, states, 2, "the row of one part is gone")

	// "b/1" comes: "a/1" holds more than its share and gives up its
	// highest part, part 2, which "b/1" takes once it is handed over;
	// part 1 stays "a/1"'s.
	h = hold("b/1", 1, 2)
	require.False(t, h.Held || h.Assigned, "held by a/1, a live relayer")
	require.Equal(t, 2, h.Relayers)
	h = hold("a/1", 1, 2)
	require.True(t, h.Held, "a/1 holds it while it hands it over")
	require.False(t, h.Assigned, "a/1 gives up its highest part")
	h = hold("a/1", 0, 2)
	require.True(t, h.Held && h.Assigned, "and keeps its other")
	h = hold("b/1", 0, 2)
	require.False(t, h.Held || h.Assigned, "part 1 is a/1's")
	require.NoError(t, e.DB.ReleaseSink(ctx, "kafka#2/2", "a/1"))
	h = hold("b/1", 1, 2)
	require.True(t, h.Held && h.Assigned, "a part held by none goes to the relayer holding fewest")
	h = hold("a/1", 1, 2)
	require.False(t, h.Held || h.Assigned)

	// A redeliver places every part; a failure is the sink's.
	first, _, err := e.DB.RedeliverSink(ctx, "kafka", 5)
	require.NoError(t, err)
	require.EqualValues(t, 6, first)
	require.NoError(t, e.DB.FailSinkEvent(ctx, "kafka#2/2", "b/1", 6, "500"))
	n, err := e.DB.RedeliverFailed(ctx, "kafka")
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	states, err = e.DB.SinkStates(ctx)
	require.NoError(t, err)
	for _, st := range states {
		require.EqualValues(t, 5, st.DeliveredUpto, st.Name)
		require.EqualValues(t, 1, st.Failed, st.Name)
	}

	// A third reaper holds nothing of two parts and takes nothing: each
	// of the others holds its share (one), and keeps it.
	h = hold("c/1", 0, 2)
	require.False(t, h.Held || h.Assigned)
	require.Equal(t, 3, h.Relayers)
	h = hold("a/1", 0, 2)
	require.True(t, h.Held && h.Assigned, "a/1 keeps its part when c/1 comes")
	h = hold("b/1", 1, 2)
	require.True(t, h.Held && h.Assigned, "b/1 keeps its part when c/1 comes")
	require.NoError(t, e.DB.LeaveRelay(ctx, "kafka", "c/1"))

	// "b/1" leaves: once its lease is given up, part 2 is a/1's again.
	require.NoError(t, e.DB.LeaveRelay(ctx, "kafka", "b/1"))
	require.NoError(t, e.DB.ReleaseSink(ctx, "kafka#2/2", "b/1"))
	h = hold("a/1", 1, 2)
	require.True(t, h.Held && h.Assigned)
	require.Equal(t, 1, h.Relayers)
	require.Equal(t, "kafka", db.SinkOfRow("kafka#2/2"))
	require.Equal(t, "webhook:https://h/p#x", db.SinkOfRow("webhook:https://h/p#x"))
}
