package reaper

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/room"
)

// PrintReport writes voucher v's sale report for a person: one figure a
// line, and its waiting room's story (queue, nil: none). Refused claims
// are not in it: only each gateway replica knows its own
// (GET /admin/v1/vouchers/{id}/report on a replica).
func PrintReport(w io.Writer, v db.Voucher, r db.Report, queue *room.Story) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(k, f string, a ...any) { fmt.Fprintf(tw, "%s\t"+f+"\n", append([]any{k}, a...)...) }
	at := func(t *time.Time) string {
		if t == nil {
			return "–"
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	line("voucher", "%d %q (%s)", v.ID, v.Name, v.Kind)
	line("opened", "%s", at(&r.OpenedAt))
	line("first admission", "%s", at(r.FirstAdmissionAt))
	line("last admission", "%s", at(r.LastAdmissionAt))
	if r.SoldOutAt != nil {
		line("sold out", "%s, %s after opening", at(r.SoldOutAt), time.Duration(*r.TimeToSellOutMS)*time.Millisecond)
	} else {
		line("sold out", "no")
	}
	line("stock", "%d (%d added on sale), %d unsold", r.StockTotal, r.ToppedUpUnits, r.UnsoldUnits)
	switch {
	case r.SplitAt != nil:
		line("redis buckets", "%d, split at %s (hot since %s)", r.StockBuckets, at(r.SplitAt), at(r.HotSince))
	case r.HotSince != nil:
		line("redis buckets", "%d (hot since %s)", r.StockBuckets, at(r.HotSince))
	default:
		line("redis buckets", "%d", r.StockBuckets)
	}
	line("admitted", "%d orders, %d units", r.AdmittedOrders, r.AdmittedUnits)
	line("distinct buyers", "%d", r.DistinctBuyers)
	var st []string
	for _, s := range []order.Status{order.StatusCreated, order.StatusPaid, order.StatusCompleted, order.StatusCancelled, order.StatusFailed} {
		st = append(st, fmt.Sprintf("%s %d", s, r.Orders[s]))
	}
	line("orders", "%s", strings.Join(st, ", "))
	if r.PaidShare != nil {
		line("paid share", "%.1f %%", 100**r.PaidShare)
	}
	line("released", "%d units%s", r.ReleasedUnits, byReason(r.ReleasedByReason))
	line("resold", "%d units", r.ResoldUnits)
	line("failed", "%d orders%s", r.Orders[order.StatusFailed], byReason(r.FailedByReason))
	line("dead letters", "%d", r.DeadLetters)
	line("late payments", "%d", r.LatePayments)
	if r.GrabbedAmount != nil {
		line("grabbed amount", "%d", *r.GrabbedAmount)
		line("refunded amount", "%d at %s", *r.RefundedAmount, at(r.RefundedAt))
	}
	p := r.Persistence
	line("persistence lag", "max %d ms, p99 %d ms, mean %d ms over %d orders (%d persisted before it was recorded)",
		p.MaxLagMS, p.P99LagMS, p.MeanLagMS, p.Orders, p.Unknown)
	line("largest backlog", "%d orders at %s", p.LargestBacklog, at(p.LargestBacklogAt))
	if q := queue; q != nil {
		line("queue", "%d joined (%d in the pre-queue), %d admitted, %d bought with a pass, %d lapsed", q.Joined, q.Prequeued, q.Admitted, q.Bought, q.Lapsed)
		gone := "not known while the sale is on"
		if q.GoneBeforeTurn != nil {
			gone = fmt.Sprint(*q.GoneBeforeTurn)
		}
		line("never admitted", "%d: %d told sold out, %d told closed, gone before their turn %s", q.Waiting, q.ToldSoldOut, q.ToldClosed, gone)
		if t := q.TimeInQueue; t != nil {
			line("time in queue", "p50 %d s, p99 %d s, max %d s", t.P50, t.P99, t.Max)
		}
	}
	line("refused claims", "known only to each gateway replica: GET /admin/v1/vouchers/%d/report", v.ID)
	return tw.Flush()
}

// byReason is " (reason n, ...)", sorted, or "".
func byReason(m map[string]int64) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
