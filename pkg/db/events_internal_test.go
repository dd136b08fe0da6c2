package db

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A row's snapshots, written by hand, read back as they were: large ids
// exactly, strings that need escaping, times to the millisecond, unpaid.
func TestSnapshotsRoundTrip(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	paid := now.Add(time.Minute)
	in := []Snapshot{
		{OrderID: 384427387514814466, VoucherID: 7, UserID: "alice@x.y", Status: "paid", Quantity: 2, CreatedAt: now,
			ExpiresAt: now.Add(15 * time.Minute), PaidAt: &paid},
		{OrderID: 1<<62 + 1, VoucherID: 1<<53 + 1, UserID: "b", Status: "failed", Reason: "out_of_stock", Quantity: 1, Amount: 1234,
			Code: "q\"uo\\te <&> é\n\u2028", Drawn: 2, CreatedAt: now, ExpiresAt: now},
	}
	raw := encodeSnapshots(in)
	require.True(t, json.Valid(raw), "%s", raw)
	out, err := decodeSnapshots(raw)
	require.NoError(t, err)
	require.Equal(t, in, out)
	_, err = decodeSnapshots([]byte(`[[1,2,"u"]]`))
	require.Error(t, err, "a short event")
	empty, err := decodeSnapshots(encodeSnapshots(nil))
	require.NoError(t, err)
	require.Empty(t, empty)
}
