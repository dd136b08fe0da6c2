package order

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestIDRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		entry string
		index int
		p     int
	}{
		{"first ms of epoch", "1704067200000-0", 0, 0},
		{"today", "1763727924123-17", 3, 5},
		{"max seq, index and partition", "1763727924123-127", 31, 1023},
		{"far future", "3900000000000-1", 0, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := IDOf(tt.entry, tt.index, tt.p)
			require.NoError(t, err)
			require.GreaterOrEqual(t, id, int64(0))
			p, entry, index := EntryOf(id)
			require.Equal(t, tt.p, p)
			require.Equal(t, tt.entry, entry)
			require.Equal(t, tt.index, index)
		})
	}
}

// An order's position, as admit.lua answers it, names the same order as
// its entry and index: position = entry sequence × MaxPerEntry + index.
func TestPositionIsEntryAndIndex(t *testing.T) {
	byPos, err := IDFromPosition("1763727924123-70", 4) // entry sequence 2, index 6
	require.NoError(t, err)
	byEntry, err := IDOf("1763727924123-2", 6, 4)
	require.NoError(t, err)
	require.Equal(t, byEntry, byPos)
}

func TestIDOrdersByTime(t *testing.T) {
	a, err := IDOf("1763727924123-127", 31, 1023)
	require.NoError(t, err)
	b, err := IDOf("1763727924124-0", 0, 0)
	require.NoError(t, err)
	require.Less(t, a, b)
	c, err := IDOf("1763727924124-0", 1, 0)
	require.NoError(t, err)
	require.Less(t, b, c)
}

func TestIDRejects(t *testing.T) {
	for _, tt := range []struct {
		entry string
		index int
		p     int
	}{
		{"garbage", 0, 0},
		{"1763727924123-128", 0, 0}, // entry sequence does not fit
		{"1763727924123-1", 32, 0},  // index does not fit
		{"1763727924123-1", -1, 0},
		{"1763727924123-1", 0, 1024}, // partition does not fit
		{"1600000000000-1", 0, 0},    // before the epoch
		{"1763727924123-x", 0, 0},
		{"-1", 0, 0},
	} {
		_, err := IDOf(tt.entry, tt.index, tt.p)
		require.ErrorIs(t, err, ErrBadEntryID, tt.entry)
	}
	_, err := IDFromPosition("1763727924123-4096", 0) // position does not fit
	require.ErrorIs(t, err, ErrBadEntryID)
}

func TestDayUsesZone(t *testing.T) {
	shanghai := time.FixedZone("CST", 8*3600)
	at := time.Date(2026, 11, 21, 17, 30, 0, 0, time.UTC) // fixed date: formatting only; nothing is stored.
	require.Equal(t, "20261121", Day(at, time.UTC))       // fixed date: at's day
	require.Equal(t, "20261122", Day(at, shanghai))       // fixed date: at's day in Shanghai
}
