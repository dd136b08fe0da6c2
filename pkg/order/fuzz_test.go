package order

import (
	"errors"
	"testing"
)

// FuzzOrderID: any stream entry id and index either make an order id
// that leads back to them, or are refused with ErrBadEntryID; never a
// panic.
func FuzzOrderID(f *testing.F) {
	for _, s := range []string{"1704067200000-0", "1763727924123-127", "1763727924123-128", "-", "1-", "x-1", "99999999999999999999-1", "1763727924123-17-3"} {
		f.Add(s, 5, 3)
	}
	f.Fuzz(func(t *testing.T, entry string, index, p int) {
		id, err := IDOf(entry, index, p)
		if err != nil {
			if !errors.Is(err, ErrBadEntryID) {
				t.Fatalf("%q: %v", entry, err)
			}
			return
		}
		if id < 0 {
			t.Fatalf("%q: negative id %d", entry, id)
		}
		gotP, gotEntry, gotIndex := EntryOf(id)
		again, err := IDOf(gotEntry, gotIndex, gotP)
		if err != nil || again != id || gotP != p || gotIndex != index {
			t.Fatalf("%q/%d in %d: id %d leads to %q/%d in %d (%v)", entry, index, p, id, gotEntry, gotIndex, gotP, err)
		}
	})
}

// FuzzItem: what ParseItem accepts encodes back to itself.
func FuzzItem(f *testing.F) {
	for _, s := range []string{"", "1|250|", "7|0|GIFT-1", "0|1|", "1|-1|", "1|1|a b", "1|2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		it, err := ParseItem(s)
		if err != nil {
			if !errors.Is(err, ErrBadItem) {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		back, err := ParseItem(it.Encode())
		if err != nil || back != it {
			t.Fatalf("%q: %+v encodes to %q, read back %+v (%v)", s, it, it.Encode(), back, err)
		}
	})
}
