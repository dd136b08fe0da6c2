package token

import (
	"encoding/json"
	"testing"
	"time"
)

// BenchmarkVerifyHS256 is one user token's check on the fast path, as
// every claim pays it: go test -run '^$' -bench VerifyHS256 -benchmem ./pkg/token
func BenchmarkVerifyHS256(b *testing.B) {
	a := testAuth()
	tok, err := SignUserFor(testSecret, "4815162342", "", "", testNow.Add(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Verify(tok); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzNumericDate holds numericDate's shortcut for number literals to the
// decoding it skips (json.Number through json.Unmarshal), for any valid
// JSON value: the same time or both refused.
func FuzzNumericDate(f *testing.F) {
	for _, seed := range []string{`1700000000`, `-1`, `1.5e9`, `1e300`, `-0`, `0.000001`, `"1700000000"`, `"x"`, `null`, `{}`, `[1]`, `true`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		var got numericDate
		gotErr := json.Unmarshal(b, &got)
		var want numericDate
		var n json.Number
		wantErr := json.Unmarshal(b, &n)
		if wantErr == nil {
			wantErr = want.fromNumber(n)
		}
		if (gotErr == nil) != (wantErr == nil) || !got.Equal(want.Time) {
			t.Fatalf("%q: got (%v, %v), want (%v, %v)", b, got.Time, gotErr, want.Time, wantErr)
		}
	})
}
