package event

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/flashsale/flashsale/pkg/db"
)

// The hand-written body is what encoding/json makes of the event, byte
// for byte, whatever the order holds: escapes, zeros left out, times with
// and without nanoseconds, in and out of UTC.
func FuzzEventJSON(f *testing.F) {
	f.Add(int64(384427387514814466), int64(7), "alice", "paid", "", "CODE-1", int64(2), int64(0), int64(1700000000123456789), int64(0), 0, "flashsale")
	f.Add(int64(1), int64(1<<53+1), "q\"uo\\te <&> é\n\u2028", "cancelled", "payment_expired", "", int64(1), int64(1234), int64(1700000000000000000), int64(3600), 1, "urn:x")
	f.Add(int64(2), int64(3), "\xff", "lost", "", "", int64(0), int64(-5), int64(0), int64(-7200), 0, "")
	f.Fuzz(func(t *testing.T, orderID, voucher int64, user, status, reason, code string, quantity, amount, nanos, zone int64, drawn int, source string) {
		at := time.Unix(0, nanos).In(time.FixedZone("z", int(zone%86400)))
		paid := at.Add(time.Duration(quantity) * time.Millisecond)
		e := db.OutboxEvent{Snapshot: db.Snapshot{OrderID: orderID, VoucherID: voucher, UserID: user, Status: status, Reason: reason,
			Quantity: quantity, Amount: amount, Code: code, Drawn: drawn, CreatedAt: at, ExpiresAt: at.Add(time.Hour)},
			Row: orderID, K: drawn, Sequence: voucher, OccurredAt: at}
		if amount%2 == 0 {
			e.PaidAt = &paid
		}
		ev := Of(source, e)
		want, err := json.Marshal(ev)
		if err != nil {
			t.Skip(err) // a time outside years 0-9999: no order has one
		}
		if got := ev.JSON(); string(got) != string(want) {
			t.Fatalf("wrote\n%s\nencoding/json writes\n%s", got, want)
		}
	})
}

// A split's body is what encoding/json makes of it too, and its data the
// split's: the voucher as subject, its buckets, when.
func TestASplitsEventJSON(t *testing.T) {
	for _, at := range []time.Time{time.UnixMilli(1700000000123).UTC(), time.UnixMilli(1700000000000).In(time.FixedZone("z", 3600))} {
		e := db.OutboxEvent{Snapshot: db.Snapshot{VoucherID: 7, Split: &db.Split{Buckets: 3, At: at}}, Row: 41, K: 2, Sequence: 9, OccurredAt: at}
		ev := Of("flashsale", e)
		want, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if got := ev.JSON(); string(got) != string(want) {
			t.Fatalf("wrote\n%s\nencoding/json writes\n%s", got, want)
		}
		var back struct {
			Type    string
			Subject string
			Data    map[string]any
		}
		if err := json.Unmarshal(ev.JSON(), &back); err != nil {
			t.Fatal(err)
		}
		wantData := map[string]any{"voucher_id": "7", "stock_buckets": float64(3), "split_at": at.Format(time.RFC3339Nano)}
		if back.Type != "voucher.split" || back.Subject != "7" || len(back.Data) != 3 ||
			back.Data["voucher_id"] != wantData["voucher_id"] || back.Data["stock_buckets"] != wantData["stock_buckets"] || back.Data["split_at"] != wantData["split_at"] {
			t.Fatalf("read back %+v", back)
		}
	}
}
