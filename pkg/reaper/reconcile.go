package reaper

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/draw"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/room"
	"github.com/flashsale/flashsale/pkg/settle"
)

// Difference is one value Redis holds that MySQL and the streams say it
// should not.
type Difference struct {
	What  string `json:"what"` // "stock", "user alice", "day 20261121 user alice", ...
	Redis int64  `json:"redis"`
	Want  int64  `json:"want"`
}

// VoucherCheck is the reconciliation of one voucher.
type VoucherCheck struct {
	VoucherID int64 `json:"voucher_id,string"`
	// InFlight: admitted orders still in the stream, not yet in MySQL.
	InFlight    int          `json:"in_flight"`
	Differences []Difference `json:"differences"`
	Repaired    bool         `json:"repaired"`
	// Quiet: nothing is being admitted (the sale is over or paused), so a
	// difference is not a claim in flight between the reads.
	Quiet bool `json:"quiet"`
	// Splitting: its Redis buckets are being split (the splitter): not
	// compared this time.
	Splitting bool `json:"splitting,omitempty"`
}

// Reconcile compares, for every voucher on sale or ended less than two days
// ago, what Redis holds with what it should hold: MySQL's remaining stock
// minus the orders still in flight in the streams, and per-user and per-day
// counts of the live (created, paid) and in-flight orders. Releases owed to
// Redis are settled first. With repair, a voucher that differs is rewritten
// from that truth, and every release of it is marked done on both sides;
// then every partition is marked loaded (rdb.LoadedKey).
// Run repair while no claims are being admitted (gateways scaled to zero or
// the sale over): a claim admitted between the read and the rewrite would
// be overwritten.
func Reconcile(ctx context.Context, r *rdb.Store, d *db.Store, now time.Time, repair bool) ([]VoucherCheck, error) {
	if err := r.EnsureGroups(ctx); err != nil {
		return nil, err
	}
	if _, err := settle.Owed(ctx, r, d, 500, 0, func() time.Time { return now }); err != nil {
		return nil, fmt.Errorf("settle owed releases: %w", err)
	}
	vouchers, err := d.ActiveVouchers(ctx, now, rdb.KeysOutliveSale)
	if err != nil {
		return nil, err
	}
	streams := streamCache{}
	var out []VoucherCheck
	for _, v := range vouchers {
		if v.Splitting() { // its users' records are moving between buckets: compared once split
			out = append(out, VoucherCheck{VoucherID: v.ID, Splitting: true})
			continue
		}
		entries, err := streams.of(ctx, r, r.VoucherPartitions(v.ID, v.StockBuckets))
		if err != nil {
			return out, err
		}
		mode := reportOnly
		if repair {
			mode = rebuildWhole
		}
		check, err := reconcileVoucher(ctx, r, d, v, entries, now, mode)
		if err != nil {
			return out, fmt.Errorf("voucher %d: %w", v.ID, err)
		}
		out = append(out, check)
	}
	if repair { // every voucher on sale is in Redis now (the restorer's mark), each in its rooms' index
		ids := make([]int64, len(vouchers))
		for i, v := range vouchers {
			ids[i] = v.ID
		}
		if err := r.IndexRooms(ctx, r.AllPartitions(), ids); err != nil {
			return out, err
		}
		if err := r.MarkAllLoaded(ctx); err != nil {
			return out, err
		}
	}
	return out, nil
}

// streamCache holds the partitions' stream entries read so far in one
// round, each stream read once however many vouchers it carries.
type streamCache map[int][]rdb.StreamOrder

// of is the entries of partitions ps (a hot voucher's buckets admit into
// several partitions' streams).
func (c streamCache) of(ctx context.Context, r *rdb.Store, ps []int) ([]rdb.StreamOrder, error) {
	var orders []rdb.StreamOrder
	for _, p := range ps {
		if _, ok := c[p]; !ok {
			es, err := r.StreamOrders(ctx, p)
			if err != nil {
				return nil, err
			}
			c[p] = es
		}
		orders = append(orders, c[p]...)
	}
	return orders, nil
}

// repairMode is what reconcileVoucher does with a voucher that differs.
type repairMode int

const (
	reportOnly   repairMode = iota
	rebuildWhole            // every bucket rewritten (reconcile --repair: the sale is paused)
	restoreLost             // only the buckets Redis lacks (the restorer: the sale runs)
)

func reconcileVoucher(ctx context.Context, r *rdb.Store, d *db.Store, v db.Voucher, stream []rdb.StreamOrder, now time.Time, mode repairMode) (VoucherCheck, error) {
	var candidates []order.Order
	for _, e := range stream {
		if e.Err == nil && e.Order.VoucherID == v.ID {
			candidates = append(candidates, e.Order)
		}
	}
	ids := make([]int64, len(candidates))
	for i, o := range candidates {
		ids[i] = o.ID
	}
	// MySQL in one snapshot, read after the streams: an entry of stream
	// persisted by then is in MySQL's stock and orders, one not yet in
	// neither. The voucher is read again in it: the stock read with the
	// round's list of vouchers may predate orders persisted since.
	var (
		persisted         map[int64]bool
		live              []db.LiveOrder
		free              []order.Item
		released, changes []int64
	)
	err := d.Snapshot(ctx, func(d *db.Store) error {
		var err error
		if v, err = d.Voucher(ctx, v.ID); err != nil {
			return err
		}
		if persisted, err = d.ExistingOrders(ctx, ids); err != nil {
			return err
		}
		// A draw's Redis counts entries per user (admit.lua): every entry
		// that did not fail counts, whatever the draw made of it.
		counted := d.LiveOrders
		if v.IsDraw() {
			counted = d.Entrants
		}
		if live, err = counted(ctx, v.ID); err != nil {
			return err
		}
		if v.Traits().Pooled {
			if free, err = d.FreeItems(ctx, v.ID); err != nil {
				return err
			}
		}
		if mode == reportOnly {
			return nil
		}
		// What a repair records in Redis as done: the releases MySQL owes
		// it and every change, as of the state it writes.
		if released, err = d.OwedReleaseIDs(ctx, v.ID); err != nil {
			return err
		}
		changes, err = d.ChangeIDs(ctx, v.ID)
		return err
	})
	if err != nil {
		return VoucherCheck{VoucherID: v.ID}, err
	}
	check := VoucherCheck{VoucherID: v.ID, Quiet: v.Paused || (v.EndsAt != nil && !now.Before(*v.EndsAt))}

	want := rdb.VoucherState{Found: true, Users: map[string]int64{}, Days: map[string]map[string]int64{}}
	want.Voucher = settle.RedisVoucher(v, v.Stock)
	// Per-day counts exist only for vouchers with a daily limit (admit.lua).
	daily := v.PerUserDailyLimit > 0
	// Counts are of units: an order of quantity n counts n.
	count := func(user, day string, units int64, recent bool) {
		want.Users[user] += units
		if daily && recent && day != "" {
			if want.Days[day] == nil {
				want.Days[day] = map[string]int64{}
			}
			want.Days[day][user] += units
		}
	}
	for _, o := range live {
		count(o.UserID, o.Day, max(o.Quantity, 1), now.Sub(o.CreatedAt) < rdb.DayKeyTTL)
	}
	inFlightItems := map[int64]bool{}
	for _, o := range candidates {
		if !persisted[o.ID] {
			check.InFlight++
			if !o.Entry { // an entry takes no stock
				want.Voucher.Stock -= o.Units()
			}
			count(o.UserID, o.Day, o.Units(), true)
			inFlightItems[o.Item.No] = true
		}
	}
	wantPool(v, &want.Voucher, free, inFlightItems, now)

	days := slices.Sorted(maps.Keys(want.Days))
	have, err := r.ReadVoucherState(ctx, v.ID, days)
	if err != nil {
		return check, err
	}
	if v.IsDraw() && v.DrawState != draw.StateOpen {
		// Once drawn, MySQL's stock and items are the winners'; Redis,
		// which admits nothing more, keeps what it had.
		want.Voucher.Stock, want.Voucher.Items = have.Voucher.Stock, have.Voucher.Items
	}
	diff := func(what string, h, w int64) {
		if h != w {
			check.Differences = append(check.Differences, Difference{What: what, Redis: h, Want: w})
		}
	}
	if !have.Found {
		diff("voucher present", 0, 1)
	}
	diff("stock", have.Voucher.Stock, want.Voucher.Stock)
	diff("per_user_limit", have.Voucher.PerUserLimit, want.Voucher.PerUserLimit)
	diff("per_user_daily_limit", have.Voucher.PerUserDailyLimit, want.Voucher.PerUserDailyLimit)
	diff("starts_at (ms)", msOf(have.Voucher.StartsAt), msOf(want.Voucher.StartsAt))
	diff("ends_at (ms)", msOf(have.Voucher.EndsAt), msOf(want.Voucher.EndsAt))
	diff("keys expire at (s)", unixOf(have.Voucher.ExpireAt), unixOf(want.Voucher.ExpireAt))
	diff("paused", int64(bit(have.Voucher.Paused)), int64(bit(want.Voucher.Paused)))
	diff("proof_of_work", have.Voucher.ProofOfWork, want.Voucher.ProofOfWork)
	diff("access (until ms; -1 the whole sale)", have.Voucher.Access, want.Voucher.Access)
	hr, _ := room.Decode(have.Voucher.Room)
	wr, _ := room.Decode(want.Voucher.Room)
	diff("waiting_room.admit_per_second", hr.Rate(), wr.Rate())
	diff("waiting_room.prequeue_seconds", hr.Prequeue(), wr.Prequeue())
	diff("waiting_room.pass_seconds", hr.PassFor(), wr.PassFor())
	if want.Voucher.Pooled {
		missing, extra := poolDiff(have.Voucher.Items, want.Voucher.Items)
		diff("pool: items missing", int64(len(want.Voucher.Items)-missing), int64(len(want.Voucher.Items)))
		diff("pool: items that should not be there", int64(extra), 0)
		diff("pool closed", int64(bit(have.Voucher.Closed)), int64(bit(want.Voucher.Closed)))
	}
	for _, u := range slices.Sorted(maps.Keys(union(have.Users, want.Users))) {
		diff("user "+u, have.Users[u], want.Users[u])
	}
	for _, day := range days {
		for _, u := range slices.Sorted(maps.Keys(union(have.Days[day], want.Days[day]))) {
			diff("day "+day+" user "+u, have.Days[day][u], want.Days[day][u])
		}
	}
	// Redis's sets of released orders are not compared: they hold the
	// releases of the last settle.ForgetAfter (the trimmer forgets the
	// rest). A release Redis missed shows in its stock and its user's
	// counts.

	if len(check.Differences) == 0 {
		return check, nil
	}
	switch mode {
	case rebuildWhole:
		if err := settle.Rebuild(ctx, r, want, released, changes); err != nil {
			return check, err
		}
		check.Repaired = true
	case restoreLost:
		wrote, err := settle.Restore(ctx, r, want, released, changes)
		if err != nil {
			return check, err
		}
		check.Repaired = wrote
	}
	return check, nil
}

// wantPool sets what a pooled voucher's pool should hold: MySQL's free
// items less those the orders in flight took; nothing once a sale that
// refunds at its end is over or refunded (the refunder closes it).
func wantPool(v db.Voucher, want *rdb.Voucher, free []order.Item, inFlight map[int64]bool, now time.Time) {
	t := v.Traits()
	if !t.Pooled {
		return
	}
	if t.RefundsAtEnd && (v.RefundedAt != nil || (v.EndsAt != nil && !now.Before(*v.EndsAt))) {
		want.Closed, want.Stock, want.Items = true, 0, nil
		return
	}
	want.Items = slices.DeleteFunc(free, func(it order.Item) bool { return inFlight[it.No] })
}

// poolDiff counts the items of want that have lacks, and those it holds
// beyond want (a duplicate counts as extra).
func poolDiff(have, want []order.Item) (missing, extra int) {
	in := make(map[order.Item]int, len(have))
	for _, it := range have {
		in[it]++
	}
	for _, it := range want {
		if in[it] > 0 {
			in[it]--
		} else {
			missing++
		}
	}
	for _, n := range in {
		extra += n
	}
	return missing, extra
}

func bit(b bool) int {
	if b {
		return 1
	}
	return 0
}

func msOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func unixOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

func union(a, b map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(a)+len(b))
	for k := range a {
		out[k] = 0
	}
	for k := range b {
		out[k] = 0
	}
	return out
}

// PrintChecks writes the reconciliation as a table; it lists at most
// maxRows differences per voucher.
func PrintChecks(w io.Writer, checks []VoucherCheck, maxRows int) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "voucher\tin flight\tdifference\tredis\twant\t")
	total := 0
	for _, c := range checks {
		if c.Splitting {
			fmt.Fprintf(tw, "%d\t\tnot compared: its buckets are being split\t\t\t\n", c.VoucherID)
			continue
		}
		if len(c.Differences) == 0 {
			fmt.Fprintf(tw, "%d\t%d\tnone\t\t\t\n", c.VoucherID, c.InFlight)
			continue
		}
		for i, d := range c.Differences {
			if i == maxRows {
				fmt.Fprintf(tw, "%d\t\t… %d more\t\t\t\n", c.VoucherID, len(c.Differences)-maxRows)
				break
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t%d\t\n", c.VoucherID, c.InFlight, d.What, d.Redis, d.Want)
		}
		total += len(c.Differences)
		if c.Repaired {
			fmt.Fprintf(tw, "%d\t\trepaired: Redis rewritten from MySQL and the streams\t\t\t\n", c.VoucherID)
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "%d vouchers checked, %d differences\n", len(checks), total)
}
