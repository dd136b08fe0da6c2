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
	st := story(state, 100_000, []int64{1, 3, 4})
	require.Equal(t, &Story{Joined: 9, Prequeued: 6, Admitted: 5, Bought: 3, Lapsed: 1, Waiting: 4,
		TimeInQueue: &QueueTimes{P50: 1, P99: 4, Max: 4}}, st)
	// Place 7 joined at 102 and waits; none of the later ones is admitted.
	state["a:106"], state["front"] = "7", "7"
	st = story(state, 100_000, nil)
	// 6 waited 106-100 (the pre-queue's join is the start), 7 106-102.
	require.Equal(t, &QueueTimes{P50: 1, P99: 6, Max: 6}, st.TimeInQueue)
	require.Nil(t, story(map[string]string{"pre": "3"}, 0, nil).TimeInQueue, "nobody admitted")
}
