package room

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A room's story from its state: six in the pre-queue placed at the
// start (second 100), three joining later; admitted 2 at the start, 2 a
// second later, 1 at second 104; places 1 and 2's segment lapsed, 1
// having bought.
func TestAStoryFromTheRoomsState(t *testing.T) {
	state := map[string]string{
		"pre": "6", "frozen": "1", "tail": "9", "front": "5", "gone": "2",
		"j:102": "7", "j:103": "9",
		"a:100": "2", "a:101": "4", "a:104": "5",
	}
	rec := &record{State: state, StartMs: 100_000, Stock: 3, Bought: []int64{1, 3, 4}}
	st := story(rec, 105_000)
	require.Equal(t, &Story{Joined: 9, Prequeued: 6, Admitted: 5, Bought: 3, Lapsed: 1, Waiting: 4,
		TimeInQueue: &QueueTimes{P50: 1, P99: 4, Max: 4}}, st, "on sale: nobody is known gone")
	// Place 7 joined at 102 and waits; none of the later ones is admitted.
	state["a:106"], state["front"] = "7", "7"
	st = story(&record{State: state, StartMs: 100_000, Stock: 3}, 106_000)
	// 6 waited 106-100 (the pre-queue's join is the start), 7 106-102.
	require.Equal(t, &QueueTimes{P50: 1, P99: 6, Max: 6}, st.TimeInQueue)
	require.Nil(t, story(&record{State: map[string]string{"pre": "3"}}, 0).TimeInQueue, "nobody admitted")
}

// Of the places never admitted, those told sold out or closed (their bit
// in the told bitmap, Redis's bit order) are counted once each, the
// admitted ones told sold out are not, and the rest are gone once the
// sale is over.
func TestAStoryCountsWhoWasToldTheEnd(t *testing.T) {
	state := map[string]string{"pre": "0", "frozen": "1", "tail": "6", "front": "2"}
	var bits []byte
	set := func(b int64) {
		for int64(len(bits)) <= b/8 {
			bits = append(bits, 0)
		}
		bits[b/8] |= 0x80 >> (b % 8)
	}
	set(2 * 1)   // ticket 1, admitted, told sold out: not counted
	set(2 * 3)   // 3 told sold out
	set(2 * 4)   // 4 told sold out,
	set(2*4 + 1) // and later closed: counted once
	set(2*5 + 1) // 5 told closed; 6 never asked again
	st := story(&record{State: state, Stock: 0, Told: bits}, 1)
	require.Equal(t, int64(4), st.Waiting)
	require.Equal(t, int64(2), st.ToldSoldOut)
	require.Equal(t, int64(1), st.ToldClosed)
	require.NotNil(t, st.GoneBeforeTurn)
	require.Equal(t, int64(1), *st.GoneBeforeTurn, "ticket 6")

	st = story(&record{State: state, Stock: 5, EndMs: 10_000, Told: bits}, 9_999)
	require.Nil(t, st.GoneBeforeTurn, "stock left and not closed: the sale is on")
	st = story(&record{State: state, Stock: 5, EndMs: 10_000, Told: bits}, 10_000)
	require.Equal(t, int64(1), *st.GoneBeforeTurn, "closed")
}
