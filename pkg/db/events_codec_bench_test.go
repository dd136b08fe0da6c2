package db

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/stretchr/testify/require"
)

// The outbox rows' codecs, each beside the other way of writing it: the
// encoder by hand (encodeSnapshots) against jsontext's (the
// go-json-experiment tokenizer, encoding/json/v2's); the reader on
// jsontext (decodeSnapshots) against the one written by hand it
// replaced. The benchmark says which to keep. Run: go test -run '^$'
// -bench BenchmarkSnapshotCodecs ./pkg/db (docs/BENCHMARKS.md has the
// figures).

func encodeSnapshotsJSONText(snaps []Snapshot) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(16 + 96*len(snaps))
	enc := jsontext.NewEncoder(&buf)
	toks := make([]jsontext.Token, 0, snapshotFields)
	if err := enc.WriteToken(jsontext.BeginArray); err != nil {
		return nil, err
	}
	for _, s := range snaps {
		var paid int64
		if s.PaidAt != nil {
			paid = s.PaidAt.UnixMilli()
		}
		toks = append(toks[:0], jsontext.Int(s.OrderID), jsontext.Int(s.VoucherID), jsontext.String(s.UserID),
			jsontext.String(s.Status), jsontext.String(s.Reason), jsontext.Int(s.Quantity), jsontext.Int(s.Amount),
			jsontext.String(s.Code), jsontext.Int(int64(s.Drawn)), jsontext.Int(s.CreatedAt.UnixMilli()),
			jsontext.Int(s.ExpiresAt.UnixMilli()), jsontext.Int(paid))
		if err := enc.WriteToken(jsontext.BeginArray); err != nil {
			return nil, err
		}
		for _, t := range toks {
			if err := enc.WriteToken(t); err != nil {
				return nil, err
			}
		}
		if err := enc.WriteToken(jsontext.EndArray); err != nil {
			return nil, err
		}
	}
	if err := enc.WriteToken(jsontext.EndArray); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// decodeSnapshotsByHand is the row reader decodeSnapshots replaced,
// written by hand like encodeSnapshots: kept for the benchmark.
func decodeSnapshotsByHand(raw []byte) ([]Snapshot, error) {
	d := snapshotDecoder{b: raw}
	if !d.byte('[') {
		return nil, d.fail(-1, "not an array")
	}
	out := make([]Snapshot, 0, bytes.Count(raw, []byte{'['})-1)
	if d.byte(']') {
		return out, d.end()
	}
	for {
		s, err := d.snapshot(len(out))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
		if d.byte(']') {
			return out, d.end()
		}
		if !d.byte(',') {
			return nil, d.fail(len(out), "no comma between events")
		}
	}
}

// snapshotDecoder reads a row's JSON as encodeSnapshots writes it (and
// any JSON of the same shape).
type snapshotDecoder struct {
	b []byte
	i int
}

func (d *snapshotDecoder) fail(event int, what string) error {
	if event < 0 {
		return fmt.Errorf("events: %s at byte %d", what, d.i)
	}
	return fmt.Errorf("event %d: %s at byte %d", event, what, d.i)
}

func (d *snapshotDecoder) space() {
	for d.i < len(d.b) && (d.b[d.i] == ' ' || d.b[d.i] == '\n' || d.b[d.i] == '\t' || d.b[d.i] == '\r') {
		d.i++
	}
}

// byte consumes c, after any space, if it is next.
func (d *snapshotDecoder) byte(c byte) bool {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

func (d *snapshotDecoder) end() error {
	d.space()
	if d.i != len(d.b) {
		return d.fail(-1, "data after the array")
	}
	return nil
}

func (d *snapshotDecoder) int() (int64, bool) {
	d.space()
	j := d.i
	if j < len(d.b) && d.b[j] == '-' {
		j++
	}
	digits := j
	for j < len(d.b) && d.b[j] >= '0' && d.b[j] <= '9' {
		j++
	}
	if j-digits > 1 && d.b[digits] == '0' { // JSON has no leading zero
		return 0, false
	}
	n, err := strconv.ParseInt(string(d.b[d.i:j]), 10, 64)
	if err != nil {
		return 0, false
	}
	d.i = j
	return n, true
}

// string reads a JSON string: as it is when it has no escape (what
// encodeSnapshots writes for ids, statuses and reasons), else by
// encoding/json.
func (d *snapshotDecoder) string() (string, bool) {
	d.space()
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return "", false
	}
	escaped := false
	for j := d.i + 1; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '\\':
			escaped = true
			j++
		case c < 0x20:
			return "", false
		case c == '"':
			tok := d.b[d.i : j+1]
			d.i = j + 1
			if !escaped && utf8.Valid(tok) {
				return string(tok[1 : len(tok)-1]), true
			}
			var str string // encoding/json unescapes, and replaces invalid UTF-8
			if json.Unmarshal(tok, &str) != nil {
				return "", false
			}
			return str, true
		}
	}
	return "", false
}

// snapshot reads one event's array of snapshotFields fields.
func (d *snapshotDecoder) snapshot(k int) (Snapshot, error) {
	var s Snapshot
	if !d.byte('[') {
		return s, d.fail(k, "not an array")
	}
	var n [8]int64 // order, voucher, quantity, amount, drawn, created, expires, paid
	ints := [snapshotFields]*int64{0: &n[0], 1: &n[1], 5: &n[2], 6: &n[3], 8: &n[4], 9: &n[5], 10: &n[6], 11: &n[7]}
	strs := [snapshotFields]*string{2: &s.UserID, 3: &s.Status, 4: &s.Reason, 7: &s.Code}
	for f := range snapshotFields {
		if f > 0 && !d.byte(',') {
			return s, d.fail(k, fmt.Sprintf("%d fields, not %d", f, snapshotFields))
		}
		ok := false
		if p := ints[f]; p != nil {
			*p, ok = d.int()
		} else {
			*strs[f], ok = d.string()
		}
		if !ok {
			return s, d.fail(k, fmt.Sprintf("field %d is not what it should be", f))
		}
	}
	if !d.byte(']') {
		return s, d.fail(k, fmt.Sprintf("more than %d fields", snapshotFields))
	}
	s.setNumbers(n[0], n[1], n[2], n[3], n[4], n[5], n[6], n[7])
	return s, nil
}

// sampleSnapshots is a worker's row: n orders created, a few with a
// reason, a code, a payment, a user id that needs escaping.
func sampleSnapshots(n int) []Snapshot {
	at := time.UnixMilli(1795812514926).UTC()
	out := make([]Snapshot, n)
	for i := range out {
		s := Snapshot{OrderID: 384807741375381505 + int64(i)<<10, VoucherID: 42, UserID: "user-" + strconv.Itoa(i*7919),
			Status: "created", Quantity: 1, CreatedAt: at, ExpiresAt: at.Add(15 * time.Minute)}
		if i%10 == 0 {
			s.Status, s.Reason, s.Code, s.UserID = "paid", "", "GIFT-7Q2X", `quo"ted\u-`+strconv.Itoa(i)
			paid := at.Add(time.Minute)
			s.PaidAt = &paid
		}
		out[i] = s
	}
	return out
}

// The two codecs write and read the same rows.
func TestTheSnapshotCodecsAgree(t *testing.T) {
	snaps := sampleSnapshots(50)
	hand := encodeSnapshots(snaps)
	jt, err := encodeSnapshotsJSONText(snaps)
	require.NoError(t, err)
	require.Equal(t, string(hand), string(jt))
	a, err := decodeSnapshots(hand)
	require.NoError(t, err)
	b, err := decodeSnapshotsByHand(hand)
	require.NoError(t, err)
	require.Equal(t, snaps, a)
	require.Equal(t, a, b)
}

// A row of 500 events (a worker's batch), encoded and decoded by each.
func BenchmarkSnapshotCodecs(b *testing.B) {
	snaps := sampleSnapshots(500)
	raw := encodeSnapshots(snaps)
	b.Run("encode/hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = encodeSnapshots(snaps)
		}
	})
	b.Run("encode/jsontext", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := encodeSnapshotsJSONText(snaps); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode/hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeSnapshotsByHand(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode/jsontext", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeSnapshots(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
}
