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
		e := db.Event{Snapshot: db.Snapshot{OrderID: orderID, VoucherID: voucher, UserID: user, Status: status, Reason: reason,
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
