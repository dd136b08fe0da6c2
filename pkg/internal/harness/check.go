package harness

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/flashsale/flashsale/pkg/backoff"
	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/order"
)

// Drained reports whether every partition's stream is empty with nothing
// pending, and if not, which partition is not.
func (s *Stack) Drained(ctx context.Context) (bool, string) {
	for p := range s.RDB.Partitions() {
		b, err := s.RDB.PartitionBacklog(ctx, p)
		if err != nil || b.Length > 0 || b.Orders != 0 || b.Pending > 0 {
			return false, fmt.Sprintf("partition %d: %+v %v", p, b, err)
		}
	}
	return true, ""
}

// PersistWatch follows how many orders of a voucher are in MySQL, so the
// time the last one landed is known without waiting for the sale to end.
type PersistWatch struct {
	s       *Stack
	voucher int64
	mu      sync.Mutex
	count   int64
	reached map[int64]time.Time // first time each count was seen
	stop    context.CancelFunc
	done    chan struct{}
}

// WatchPersisted starts polling voucher's order count every 10ms; start it
// before the sale.
func (s *Stack) WatchPersisted(ctx context.Context, voucher int64) *PersistWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &PersistWatch{s: s, voucher: voucher, reached: map[int64]time.Time{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			var n int64
			if err := s.DB.DB().WithContext(ctx).Raw("SELECT COUNT(*) FROM orders WHERE voucher_id = ?", voucher).Scan(&n).Error; err == nil {
				now := time.Now()
				w.mu.Lock()
				if n > w.count {
					w.count = n
					w.reached[n] = now
				}
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// Wait waits until at least n orders are in MySQL and the voucher's stream
// partition is empty, stops the watch, and returns the first time the
// count was seen at n or more (within the 10ms poll).
func (w *PersistWatch) Wait(ctx context.Context, n int64, timeout time.Duration) (time.Time, error) {
	defer func() { w.stop(); <-w.done }()
	deadline := time.Now().Add(timeout)
	ps, err := w.s.RDB.ReadVoucherPartitions(ctx, w.voucher)
	if err != nil {
		return time.Time{}, err
	}
	drained := func() bool {
		for _, p := range ps {
			if b, err := w.s.RDB.PartitionBacklog(ctx, p); err != nil || b.Length != 0 || b.Orders != 0 || b.Pending != 0 {
				return false
			}
		}
		return true
	}
	for {
		w.mu.Lock()
		count := w.count
		var at time.Time
		for c, t := range w.reached {
			if c >= n && (at.IsZero() || t.Before(at)) {
				at = t
			}
		}
		w.mu.Unlock()
		if count >= n && drained() {
			return at, nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%d of %d admitted orders in MySQL after %s", count, n, timeout)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Report is the state of one voucher after a sale, checked against the
// pipeline's invariants.
type Report struct {
	VoucherID    int64
	Kind         string
	StockTotal   int64
	PerUserLimit int64
	Sale         *SaleResult
	// MySQL
	Live      int64 // created + paid + completed orders
	LiveUnits int64 // their units (orders may take several)
	Failed    int64
	Cancelled int64
	// Missing: 202 order ids not in MySQL. Unexpected: MySQL orders no 202 announced.
	Missing, Unexpected int64
	Oversold            int64
	UsersOverLimit      int64
	RedisRemaining      int64
	MySQLRemaining      int64
	// APIChecked orders were read back through GET /v1/orders/{id};
	// APIDisagreements of them did not match MySQL.
	APIChecked, APIDisagreements int64
	PersistedAt                  time.Time
	// Pooled kinds: ItemsShared counts live orders holding an item another
	// live order holds too (each envelope, each code, one holder at most).
	ItemsShared int64
	// Envelopes: where the money is (grabbed + remaining + refunded must be
	// the total), and grabs whose 202 amount MySQL does not record.
	TotalAmount      int64
	Amounts          db.Amounts
	LiveAmount       int64 // the amounts of the live orders
	AmountMismatches int64
	// The outbox (docs/EVENTS.md): orders whose status has no event,
	// statuses of an order with more than one event, and orders whose
	// last event is not their status.
	EventsMissing, EventsDuplicated, EventsNotLast int64
}

// Check reads MySQL, Redis and the API and builds the Report of voucher.
func (s *Stack) Check(ctx context.Context, voucher int64, sale *SaleResult) (*Report, error) {
	v, err := s.DB.Voucher(ctx, voucher)
	if err != nil {
		return nil, err
	}
	r := &Report{VoucherID: voucher, Kind: v.Kind, StockTotal: v.StockTotal, PerUserLimit: v.PerUserLimit, Sale: sale,
		MySQLRemaining: v.Stock, TotalAmount: v.TotalAmount}
	if v.TotalAmount > 0 {
		if r.Amounts, err = s.DB.VoucherAmounts(ctx, voucher); err != nil {
			return nil, err
		}
		// A refund took the envelopes nobody grabbed out of the stock.
		r.StockTotal -= s.refundedCount(ctx, voucher)
	}
	var rows []struct {
		ID       int64
		UserID   string
		Status   string
		Quantity int64
		Item     int64
		Amount   int64
	}
	if err := s.DB.DB().WithContext(ctx).Raw("SELECT id, user_id, status, quantity, item, amount FROM orders WHERE voucher_id = ?", voucher).Scan(&rows).Error; err != nil {
		return nil, err
	}
	inDB := make(map[int64]string, len(rows))
	perUser := map[string]int64{}
	holders := map[int64]int64{}
	for _, row := range rows {
		inDB[row.ID] = row.Status
		if a, ok := sale.Amounts[row.ID]; ok && a != row.Amount {
			r.AmountMismatches++
		}
		switch st := order.Status(row.Status); {
		case st.IsLive():
			r.Live++
			r.LiveUnits += row.Quantity
			r.LiveAmount += row.Amount
			perUser[row.UserID] += row.Quantity
			if row.Item > 0 {
				if holders[row.Item]++; holders[row.Item] > 1 {
					r.ItemsShared++
				}
			}
		case st == order.StatusFailed:
			r.Failed++
		case st == order.StatusCancelled:
			r.Cancelled++
		}
		if _, ok := sale.Orders[row.ID]; !ok {
			r.Unexpected++
		}
	}
	for id := range sale.Orders {
		if _, ok := inDB[id]; !ok {
			r.Missing++
		}
	}
	r.Oversold = max(0, r.LiveUnits-r.StockTotal)
	for _, n := range perUser {
		if n > r.PerUserLimit {
			r.UsersOverLimit++
		}
	}
	if r.RedisRemaining, _, err = s.RDB.RemainingStock(ctx, voucher); err != nil {
		return nil, err
	}
	if r.EventsMissing, r.EventsDuplicated, r.EventsNotLast, err = s.EventProblems(ctx, voucher); err != nil {
		return nil, err
	}

	// Read orders back through the API as their owners, up to 2000 of them.
	client := NewClient(s.URL, 8)
	ids := make([]int64, 0, len(sale.Orders))
	for id := range sale.Orders {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if len(ids) > 2000 {
		ids = ids[:2000]
	}
	for _, id := range ids {
		var body struct {
			Status string `json:"status"`
			UserID string `json:"user_id"`
		}
		status, err := client.Do(ctx, "GET", "/v1/orders/"+strconv.FormatInt(id, 10), s.Token(sale.Orders[id]), nil, &body)
		r.APIChecked++
		if err != nil || status != http.StatusOK || body.Status != inDB[id] || body.UserID != sale.Orders[id] {
			r.APIDisagreements++
		}
	}
	return r, nil
}

// EventProblems holds the outbox to the orders of voucher (0: every
// voucher): it counts the orders whose status has no event, the statuses
// of an order with more than one event, and the orders whose last event
// is not their status.
func (s *Stack) EventProblems(ctx context.Context, voucher int64) (missing, duplicated, notLast int64, err error) {
	where, args := "1 = 1", []any{}
	if voucher != 0 {
		where, args = "voucher_id = ?", []any{voucher}
	}
	var orders []struct {
		ID     int64
		Status string
	}
	if err := s.DB.DB().WithContext(ctx).Raw("SELECT id, status FROM orders WHERE "+where, args...).Scan(&orders).Error; err != nil {
		return 0, 0, 0, err
	}
	events, err := s.DB.OutboxEvents(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	type key struct {
		id     int64
		status string
	}
	seen := map[key]bool{}
	last := map[int64]string{}
	for _, e := range events {
		if (voucher != 0 && e.VoucherID != voucher) || e.Split != nil { // a split is no order's
			continue
		}
		if seen[key{e.OrderID, e.Status}] {
			duplicated++
		}
		seen[key{e.OrderID, e.Status}] = true
		last[e.OrderID] = e.Status
	}
	for _, o := range orders {
		switch {
		case !seen[key{o.ID, o.Status}]:
			missing++
		case last[o.ID] != o.Status:
			notLast++
		}
	}
	return missing, duplicated, notLast, nil
}

// EventSequence waits, up to timeout, until the reapers have sequenced
// every event, and then checks the sequence: 1 to the last one given,
// each once, no gap (when nothing was deleted for its age).
func (s *Stack) EventSequence(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		n, _, err := s.DB.EventBacklog(ctx)
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("events: %d still unsequenced after %s (%v)", n, timeout, err)
		}
		if err := backoff.Sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	var last int64
	if err := s.DB.DB().WithContext(ctx).Raw("SELECT last FROM event_sequence WHERE id = 1").Scan(&last).Error; err != nil {
		return err
	}
	events, err := s.DB.Events(ctx, 0, int(last)+1)
	if err != nil {
		return err
	}
	for i, e := range events {
		if e.Sequence != int64(i)+1 {
			return fmt.Errorf("events: the %d-th event published has sequence %d: a gap or a sequence given twice", i+1, e.Sequence)
		}
	}
	if int64(len(events)) != last {
		return fmt.Errorf("events: %d published, the last sequence given is %d", len(events), last)
	}
	return nil
}

// refundedCount is how many of voucher's envelopes were refunded.
func (s *Stack) refundedCount(ctx context.Context, voucher int64) int64 {
	var n int64
	s.DB.DB().WithContext(ctx).Raw("SELECT COUNT(*) FROM items WHERE voucher_id = ? AND refunded = 1", voucher).Scan(&n)
	return n
}

// Violations lists every invariant the report breaks; empty means all hold.
func (r *Report) Violations() []string { return r.violations(false) }

// ViolationsUnderFaults is Violations for a sale run while servers were
// killed: claims may fail or be answered 503, and an order may exist
// without its 202 (the reply was lost), at most once per claim that had
// no answer or was answered outcome_unknown.
func (r *Report) ViolationsUnderFaults() []string { return r.violations(true) }

func (r *Report) violations(faults bool) []string {
	var v []string
	add := func(cond bool, format string, args ...any) {
		if cond {
			v = append(v, fmt.Sprintf(format, args...))
		}
	}
	add(r.Missing > 0, "%d admitted orders are not in MySQL", r.Missing)
	// Ambiguous: no answer, or outcome_unknown. A 503 unavailable is a
	// claim the script never ran for: it must hold no order.
	ambiguous := int64(0)
	if faults {
		ambiguous = r.Sale.Errors + r.Sale.OutcomeUnknown
	}
	add(r.Unexpected > ambiguous, "%d orders in MySQL were never admitted (%d answers were ambiguous)", r.Unexpected, ambiguous)
	add(r.Oversold > 0, "oversold by %d", r.Oversold)
	add(r.UsersOverLimit > 0, "%d users above the per-user limit", r.UsersOverLimit)
	add(r.LiveUnits+r.MySQLRemaining != r.StockTotal, "MySQL: remaining %d + live units %d != stock total %d", r.MySQLRemaining, r.LiveUnits, r.StockTotal)
	add(r.RedisRemaining != r.MySQLRemaining, "Redis remaining %d != MySQL remaining %d", r.RedisRemaining, r.MySQLRemaining)
	add(r.ItemsShared > 0, "%d live orders hold an item another live order holds", r.ItemsShared)
	if r.TotalAmount > 0 {
		a := r.Amounts
		add(a.Grabbed+a.Remaining+a.Refunded != r.TotalAmount, "money: grabbed %d + remaining %d + refunded %d != total %d", a.Grabbed, a.Remaining, a.Refunded, r.TotalAmount)
		add(a.Grabbed != r.LiveAmount, "money: envelopes held %d != amounts of live orders %d", a.Grabbed, r.LiveAmount)
	}
	add(r.AmountMismatches > 0, "%d grabs' 202 amount differs from MySQL", r.AmountMismatches)
	add(r.EventsMissing > 0, "%d orders' status has no event", r.EventsMissing)
	add(r.EventsDuplicated > 0, "%d statuses of an order have more than one event", r.EventsDuplicated)
	add(r.EventsNotLast > 0, "%d orders' last event is not their status", r.EventsNotLast)
	add(r.APIDisagreements > 0, "GET /v1/orders disagrees with MySQL on %d of %d orders", r.APIDisagreements, r.APIChecked)
	add(!faults && r.Sale.Errors > 0, "%d claims failed with a transport error or 5xx", r.Sale.Errors)
	add(!faults && r.Sale.Unavailable+r.Sale.OutcomeUnknown > 0, "%d claims answered 503 with nothing broken", r.Sale.Unavailable+r.Sale.OutcomeUnknown)
	return v
}

// Print writes the report as a table.
func (r *Report) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	s := r.Sale
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("voucher", fmt.Sprintf("%d, %s (stock %d, %d per user)", r.VoucherID, r.Kind, r.StockTotal, r.PerUserLimit))
	row("requests", s.Requests)
	row("admitted (202)", s.Admitted)
	for _, c := range slices.Sorted(maps.Keys(s.Rejected)) {
		row("rejected: "+c, s.Rejected[c])
	}
	row("errors (transport/5xx)", s.Errors)
	row("unavailable (503)", s.Unavailable)
	row("outcome unknown (503)", s.OutcomeUnknown)
	row("live orders in MySQL", r.Live)
	row("orders failed / cancelled", fmt.Sprintf("%d / %d", r.Failed, r.Cancelled))
	row("admitted but missing in MySQL", r.Missing)
	row("in MySQL but never admitted", r.Unexpected)
	row("oversold", r.Oversold)
	row("users over limit", r.UsersOverLimit)
	row("remaining Redis / MySQL", fmt.Sprintf("%d / %d", r.RedisRemaining, r.MySQLRemaining))
	if r.TotalAmount > 0 {
		a := r.Amounts
		row("money: total", r.TotalAmount)
		row("money: grabbed + remaining + refunded", fmt.Sprintf("%d + %d + %d = %d", a.Grabbed, a.Remaining, a.Refunded, a.Grabbed+a.Remaining+a.Refunded))
		row("grabs whose 202 amount MySQL differs on", r.AmountMismatches)
	}
	if r.Kind != "" && r.Kind != "units" {
		row("live orders sharing an item", r.ItemsShared)
	}
	row("API read-back disagreements", fmt.Sprintf("%d of %d", r.APIDisagreements, r.APIChecked))
	row("requests/s", fmt.Sprintf("%.0f", float64(s.Requests)/s.Duration.Seconds()))
	if s.Latency != nil {
		row("latency p50 / p99 / max", fmt.Sprintf("%s / %s / %s", us(s.Latency.ValueAtQuantile(50)), us(s.Latency.ValueAtQuantile(99)), us(s.Latency.Max())))
	}
	if !r.PersistedAt.IsZero() && !s.LastAdmit.IsZero() {
		if d := r.PersistedAt.Sub(s.LastAdmit).Round(time.Millisecond); d >= 0 {
			row("last order in MySQL after last 202", d)
		} else {
			row("last order in MySQL after last 202", "0 (in MySQL before the last 202 reached its client)")
		}
	}
	if v := r.Violations(); len(v) == 0 {
		row("invariants", "all hold")
	} else {
		row("invariants", "VIOLATED: "+strings.Join(v, "; "))
	}
	tw.Flush()
}

func us(v int64) string { return (time.Duration(v) * time.Microsecond).String() }
