package order

import (
	"errors"
	"testing"
)

// FuzzOrderID: any stream entry id either makes an order id that leads
// back to it, or is refused with ErrBadEntryID; never a panic.
func FuzzOrderID(f *testing.F) {
	for _, s := range []string{"1704067200000-0", "1763727924123-4095", "1763727924123-4096", "-", "1-", "x-1", "99999999999999999999-1", "1763727924123-17-3"} {
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, entry string, p int) {
		id, err := IDFromEntry(entry, p)
		if err != nil {
			if !errors.Is(err, ErrBadEntryID) {
				t.Fatalf("%q: %v", entry, err)
			}
			return
		}
		if id < 0 {
			t.Fatalf("%q: negative id %d", entry, id)
		}
		gotP, gotEntry := EntryOf(id)
		again, err := IDFromEntry(gotEntry, gotP)
		if err != nil || again != id || gotP != p {
			t.Fatalf("%q in %d: id %d leads to %q in %d (%v)", entry, p, id, gotEntry, gotP, err)
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
