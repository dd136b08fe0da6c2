package rdb

import (
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/pkg/order"
)

// FuzzStreamEntry: any stream entry decodes to valid orders or to entry
// errors (poison messages, dead-lettered); never a panic, never an order a
// worker could not persist, and every order's id leads back to its stream
// entry and its place there. Entries of the version before (one order in
// user_id, created_ms, ... fields) are read too.
func FuzzStreamEntry(f *testing.F) {
	f.Add("1763727924123-5", "42", "o0", "alice 1763727924123 20261121 1", "o1", "bob 1763727924123 20261121 2 3|250|", false)                       // fixed date: the seeds are parsed, never stored.
	f.Add("1763727924123-5", "42", "o0", "alice 1763727924123 20261121 1 entry", "o31", "bob 1763727924123 20261121 1", false)                       // fixed date: parsed only.
	f.Add("1763727924123-5", "42", "o0", "alice 1763727924123 20261121 1 c1f", "o1", "bob 1763727924123 20261121 1 3|250| cffffffffffffffff", false) // fixed date: parsed only.
	f.Add("1763727924123-5", "42", "o0", "alice 1763727924123 20261121 1 c01", "o1", "bob 1763727924123 20261121 1 c0", false)                       // fixed date: parsed only.
	f.Add("1763727924123-5", "-1", "o00", "x", "o32", "a b c d e f", false)
	f.Add("1763727924123-5", "42", "user_id", "alice", "created_ms", "1763727924123", true)     // fixed date: parsed only.
	f.Add("bad", "42", "o0", "alice 1763727924123 20261121 1001 0|0|", "day", "20261121", true) // fixed date: parsed only.
	f.Fuzz(func(t *testing.T, id, voucher, k1, v1, k2, v2 string, old bool) {
		values := map[string]any{"voucher_id": voucher, k1: v1, k2: v2}
		if old {
			values["day"], values["quantity"] = "20261121", "1" // fixed date: parsed only.
		}
		raw := func(i int) string { v, _ := values["o"+strconv.Itoa(i)].(string); return v }
		entries := ParseEntries(1, redis.XMessage{ID: id, Values: values})
		if len(entries) == 0 {
			t.Fatal("no entry: the stream entry would be acknowledged unread")
		}
		for _, e := range entries {
			if e.StreamID != id || e.Partition != 1 {
				t.Fatalf("entry %+v is not of %q", e, id)
			}
			if e.Err != nil {
				continue
			}
			o := e.Order
			switch {
			case o.VoucherID <= 0, o.UserID == "", len(o.UserID) > 64, len(o.Day) != 8,
				o.Quantity < 1, o.Quantity > order.MaxQuantity, o.CreatedAt.Before(order.Epoch), o.ID < 0:
				t.Fatalf("accepted an order no worker can persist: %+v", o)
			}
			if e.Index >= 0 && o.Claim != 0 && !strings.HasSuffix(raw(e.Index), " c"+strconv.FormatUint(o.Claim, 16)) {
				t.Fatalf("order %+v's claim serial is not the one its entry wrote", o)
			}
			if back, err := order.ParseItem(o.Item.Encode()); err != nil || back != o.Item {
				t.Fatalf("item %+v does not survive its encoding", o.Item)
			}
			if e.Index >= 0 {
				if p, sid, i := order.EntryOf(o.ID); p != 1 || sid != id || i != e.Index {
					t.Fatalf("order %d of %q/%d leads to %q/%d in %d", o.ID, id, e.Index, sid, i, p)
				}
			}
		}
	})
}
