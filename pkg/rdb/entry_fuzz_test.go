package rdb

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/pkg/order"
)

// FuzzStreamEntry: any stream entry decodes to a valid order or to an
// entry error (a poison message, dead-lettered); never a panic, never an
// order a worker could not persist.
func FuzzStreamEntry(f *testing.F) {
	f.Add("1763727924123-5", "42", "alice", "1763727924123", "20261121", "1", "")       // fixed date: the seeds are parsed, never stored.
	f.Add("1763727924123-5", "42", "alice", "1763727924123", "20261121", "2", "3|250|") // fixed date: parsed only.
	f.Add("1763727924123-5", "-1", "", "x", "2026", "0", "1|2")
	f.Add("bad", "42", "alice", "1763727924123", "20261121", "1001", "0|0|") // fixed date: parsed only.
	f.Fuzz(func(t *testing.T, id, voucher, user, created, day, qty, item string) {
		e := parseEntry(1, redis.XMessage{ID: id, Values: map[string]any{
			"voucher_id": voucher, "user_id": user, "created_ms": created, "day": day, "quantity": qty, "item": item,
		}})
		if e.Err != nil {
			return
		}
		o := e.Order
		switch {
		case o.VoucherID <= 0, o.UserID == "", len(o.UserID) > 64, len(o.Day) != 8,
			o.Quantity < 1, o.Quantity > order.MaxQuantity, o.CreatedAt.Before(order.Epoch), o.ID < 0:
			t.Fatalf("accepted an order no worker can persist: %+v", o)
		}
		if back, err := order.ParseItem(o.Item.Encode()); err != nil || back != o.Item {
			t.Fatalf("item %+v does not survive its encoding", o.Item)
		}
	})
}
