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
		p     int
	}{
		{"first ms of epoch", "1704067200000-0", 0},
		{"today", "1763727924123-17", 5},
		{"max seq and partition", "1763727924123-4095", 1023},
		{"far future", "3900000000000-1", 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, err := IDFromEntry(tt.entry, tt.p)
			require.NoError(t, err)
			require.GreaterOrEqual(t, id, int64(0))
			p, entry := EntryOf(id)
			require.Equal(t, tt.p, p)
			require.Equal(t, tt.entry, entry)
		})
	}
}

func TestIDOrdersByTime(t *testing.T) {
	a, err := IDFromEntry("1763727924123-4095", 1023)
	require.NoError(t, err)
	b, err := IDFromEntry("1763727924124-0", 0)
	require.NoError(t, err)
	require.Less(t, a, b)
}

func TestIDRejects(t *testing.T) {
	for _, tt := range []struct {
		entry string
		p     int
	}{
		{"garbage", 0},
		{"1763727924123-4096", 0}, // sequence does not fit
		{"1763727924123-1", 1024}, // partition does not fit
		{"1600000000000-1", 0},    // before the epoch
		{"1763727924123-x", 0},
		{"-1", 0},
	} {
		_, err := IDFromEntry(tt.entry, tt.p)
		require.ErrorIs(t, err, ErrBadEntryID, tt.entry)
	}
}

func TestDayUsesZone(t *testing.T) {
	shanghai := time.FixedZone("CST", 8*3600)
	at := time.Date(2026, 11, 21, 17, 30, 0, 0, time.UTC) // fixed date: formatting only; nothing is stored.
	require.Equal(t, "20261121", Day(at, time.UTC))       // fixed date: at's day
	require.Equal(t, "20261122", Day(at, shanghai))       // fixed date: at's day in Shanghai
}
