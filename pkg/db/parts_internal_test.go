package db

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A reaper that goes moves only its own parts; one that comes takes
// parts from the one holding more than its share, highest first; the
// parts held by none go to the relayer holding fewest.
func TestOwnsPartMovesOnlyWhatItMust(t *testing.T) {
	owns := func(relayers, holders []string, owner string) []int {
		var out []int
		for p := range holders {
			if ownsPart(relayers, holders, p, owner) {
				out = append(out, p)
			}
		}
		return out
	}
	// c is gone: its part goes to a (fewest, first by token); a and b keep theirs.
	require.Equal(t, []int{0, 2}, owns([]string{"a", "b"}, []string{"a", "b", ""}, "a"))
	require.Equal(t, []int{1}, owns([]string{"a", "b"}, []string{"a", "b", ""}, "b"))
	// c comes back: a gives up its highest part; c takes it once free.
	require.Equal(t, []int{0}, owns([]string{"a", "b", "c"}, []string{"a", "b", "a"}, "a"))
	require.Empty(t, owns([]string{"a", "b", "c"}, []string{"a", "b", "a"}, "c"))
	require.Equal(t, []int{2}, owns([]string{"a", "b", "c"}, []string{"a", "b", ""}, "c"))
	// Four parts over three: nobody holding two of them gives one up.
	require.Equal(t, []int{0, 3}, owns([]string{"a", "b", "c"}, []string{"a", "b", "c", "a"}, "a"))
	// Four parts, a holding three, c none: a gives up its highest.
	require.Equal(t, []int{0, 1}, owns([]string{"a", "b", "c"}, []string{"a", "a", "b", "a"}, "a"))
	// A part held by a reaper no longer relaying waits for its lease.
	require.Empty(t, owns([]string{"a"}, []string{"gone"}, "a"))
	require.Empty(t, owns(nil, []string{""}, "a"))
}
