package db

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"

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
		{VoucherID: 7, Split: &Split{Buckets: 3, At: now}},
		{OrderID: 5, VoucherID: 7, UserID: "c", Status: "created", Quantity: 1, CreatedAt: now, ExpiresAt: now},
	}
	raw := encodeSnapshots(in)
	require.True(t, json.Valid(raw), "%s", raw)
	out, err := decodeSnapshots(raw)
	require.NoError(t, err)
	require.Equal(t, in, out)
	_, err = decodeSnapshots([]byte(`[[1,2,"u"]]`))
	require.Error(t, err, "a short event")
	for _, bad := range []string{`[["voucher.split",7,3]]`, `[["voucher.split",7,3,1,2]]`, `[["voucher.paused",7,3,1]]`, `[["voucher.split",7,"3",1]]`} {
		_, err = decodeSnapshots([]byte(bad))
		require.Error(t, err, bad)
	}
	empty, err := decodeSnapshots(encodeSnapshots(nil))
	require.NoError(t, err)
	require.Empty(t, empty)
}

// decodeSnapshotsJSON is decodeSnapshots by encoding/json: the oracle
// the hand-written decoder is held to.
func decodeSnapshotsJSON(raw []byte) ([]Snapshot, error) {
	var rows [][]json.RawMessage
	if err := json.Unmarshal(raw, &rows); err != nil {
		return nil, err
	}
	out := make([]Snapshot, len(rows))
	for i, f := range rows {
		var tag string
		if len(f) > 0 && json.Unmarshal(f[0], &tag) == nil {
			var n [3]int64
			if tag != SplitTag || len(f) != 4 {
				return nil, fmt.Errorf("event %d: a %q of %d fields", i, tag, len(f))
			}
			for k := range n {
				if err := json.Unmarshal(f[k+1], &n[k]); err != nil {
					return nil, fmt.Errorf("event %d, field %d: %w", i, k+1, err)
				}
			}
			out[i] = Snapshot{VoucherID: n[0], Split: &Split{Buckets: int(n[1]), At: time.UnixMilli(n[2]).UTC()}}
			continue
		}
		if len(f) != snapshotFields {
			return nil, fmt.Errorf("event %d: %d fields, not %d", i, len(f), snapshotFields)
		}
		var n [8]int64
		s := &out[i]
		for k, dst := range []any{&n[0], &n[1], &s.UserID, &s.Status, &s.Reason, &n[2], &n[3], &s.Code, &n[4], &n[5], &n[6], &n[7]} {
			if err := json.Unmarshal(f[k], dst); err != nil {
				return nil, fmt.Errorf("event %d, field %d: %w", i, k, err)
			}
		}
		s.OrderID, s.VoucherID, s.Quantity, s.Amount, s.Drawn = n[0], n[1], n[2], n[3], int(n[4])
		s.CreatedAt, s.ExpiresAt = time.UnixMilli(n[5]).UTC(), time.UnixMilli(n[6]).UTC()
		if n[7] != 0 {
			t := time.UnixMilli(n[7]).UTC()
			s.PaidAt = &t
		}
	}
	return out, nil
}

// The hand-written decoder reads back whatever the encoder writes, and
// reads nothing encoding/json would read otherwise: on any input it
// accepts, encoding/json gives the same snapshots.
func FuzzSnapshots(f *testing.F) {
	f.Add(int64(384427387514814466), int64(7), "alice@x.y", "paid", "", "", int64(1700000000123), []byte(`[[1,2,"u","s","r",1,2,"c",0,3,4,0]]`))
	f.Add(int64(-1), int64(1<<53+1), "q\"uo\\te <&> \u00e9\n\u2028", "failed", "out_of_stock", "\xff\xfe", int64(0), []byte(`[ [ 1 ,2,"\u0041","s","r",1,2,"c",0,3,4,5] ]`))
	f.Add(int64(0), int64(0), "", "", "", "", int64(0), []byte(`[[01,2,"u","s","r",1,2,"c",0,3,4,0]]`))
	f.Add(int64(1), int64(2), "u", "created", "", "", int64(0), []byte(`[[1,2,"u","s","r",1,2,"c",0,3,4,0],["voucher.split",7,3,1700000000123]]`))
	f.Fuzz(func(t *testing.T, order, voucher int64, user, status, reason, code string, paid int64, raw []byte) {
		now := time.UnixMilli(paid / 7).UTC()
		in := []Snapshot{{OrderID: order, VoucherID: voucher, UserID: user, Status: status, Reason: reason, Code: code,
			Quantity: voucher % 100, Amount: order % 1000, Drawn: int(paid % 3), CreatedAt: now, ExpiresAt: now}}
		if paid != 0 {
			p := time.UnixMilli(paid).UTC()
			in[0].PaidAt = &p
		}
		enc := encodeSnapshots(in)
		got, err := decodeSnapshots(enc)
		if err != nil {
			t.Fatalf("%s: %v", enc, err)
		}
		want, err := decodeSnapshotsJSON(enc)
		if err != nil {
			t.Fatalf("encoding/json cannot read %s: %v", enc, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: read %v, encoding/json reads %v", enc, got, want)
		}
		valid := utf8.ValidString(user) && utf8.ValidString(status) && utf8.ValidString(reason) && utf8.ValidString(code)
		if valid && !reflect.DeepEqual(got, in) { // invalid UTF-8 is written as U+FFFD, as encoding/json does
			t.Fatalf("%s: read %v, wrote %v", enc, got, in)
		}
		if hand, err := decodeSnapshots(raw); err == nil {
			want, err := decodeSnapshotsJSON(raw)
			if err != nil {
				t.Fatalf("%q: read %v, encoding/json refuses it: %v", raw, hand, err)
			}
			if !reflect.DeepEqual(hand, want) {
				t.Fatalf("%q: read %v, encoding/json reads %v", raw, hand, want)
			}
		}
	})
}
