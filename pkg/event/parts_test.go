package event_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/event"
)

// An order's events are in one part, whatever their status; a split's
// by its voucher; consecutive ids (a sale's orders) spread evenly over
// the parts; with one part everything is part 0.
func TestPartOfKeepsAnOrderInOnePart(t *testing.T) {
	const parts, orders = 3, 30_000
	count := make([]int, parts)
	for id := int64(1); id <= orders; id++ {
		created := db.OutboxEvent{Snapshot: db.Snapshot{OrderID: 386349236964294657 + id, Status: "created"}}
		paid := created
		paid.Status = "paid"
		p := event.PartOf(created, parts)
		require.Equal(t, p, event.PartOf(paid, parts))
		require.Zero(t, event.PartOf(created, 1))
		count[p]++
	}
	for p, n := range count {
		require.InDelta(t, orders/parts, n, orders/parts/20, "part %d holds %d of %d orders", p, n, orders)
	}
	split := db.OutboxEvent{Snapshot: db.Snapshot{VoucherID: 7, Split: &db.Split{Buckets: 4}}}
	require.Equal(t, event.PartOf(split, parts), event.PartOf(db.OutboxEvent{Snapshot: db.Snapshot{OrderID: 7}}, parts), "a split's part is its voucher id's")
}
