package jsonstr

import (
	"encoding/json"
	"testing"
)

// Append writes what encoding/json writes, for any string.
func FuzzAppend(f *testing.F) {
	for _, s := range []string{"", "alice", "q\"uo\\te", "<&>", "é\n\u2028\u2029", "\xff\xfe", "\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := Append([]byte("x"), s); string(got) != "x"+string(want) {
			t.Fatalf("%q: wrote %s, encoding/json writes %s", s, got[1:], want)
		}
	})
}
