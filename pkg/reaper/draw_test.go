package reaper_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/draw"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
	"github.com/flashsale/flashsale/pkg/reaper"
)

// seedDraw creates, on a new Env of partitions partitions, a draw sale of
// stock units (or of items, for codes) whose entries close in an hour,
// and returns it with its seed and end.
func seedDraw(t *testing.T, partitions int, stock int64, items []order.Item) (*testenv.Env, db.Voucher, draw.Seed, time.Time) {
	t.Helper()
	e := testenv.New(t, partitions)
	ends := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	seed := draw.NewSeed()
	v := db.Voucher{Stock: stock, EndsAt: &ends, PaymentTimeoutSeconds: 60, Allocation: draw.Draw, DrawState: draw.StateOpen,
		DrawSeed: seed.Hex(), SeedCommitment: seed.Commitment()}
	if items != nil {
		v.Kind = "codes"
		return e, e.SeedPool(t, v, items), seed, ends
	}
	return e, e.SeedVoucher(t, v, -1), seed, ends
}

// enter admits one entry per user and returns the entry ids.
func enter(t *testing.T, e *testenv.Env, v int64, users ...string) []int64 {
	t.Helper()
	ids := make([]int64, len(users))
	now := time.Now()
	for i, u := range users {
		a, err := testrdb.Admitter(e.RDB).Admit(context.Background(), admission.Claim{VoucherID: v, UserID: u, Now: now, Day: order.Day(now, time.UTC)})
		require.NoError(t, err)
		require.True(t, a.Entry, "an admission of a draw is an entry")
		ids[i] = a.OrderID
	}
	return ids
}

// firstInDrawOrder is the procedure of pkg/draw done over ids by hand.
func firstInDrawOrder(seed draw.Seed, ids []int64, n int) []int64 {
	f := draw.NewFirst(seed, n)
	for _, id := range ids {
		f.Add(id)
	}
	var out []int64
	for _, r := range f.Sorted() {
		out = append(out, r.ID)
	}
	return out
}

func idsWhere(t *testing.T, e *testenv.Env, v int64, cond string, args ...any) []int64 {
	t.Helper()
	var out []int64
	require.NoError(t, e.DB.DB().Raw("SELECT id FROM orders WHERE voucher_id = ? AND "+cond+" ORDER BY id", append([]any{v}, args...)...).Scan(&out).Error)
	return out
}

func verify(t *testing.T, e *testenv.Env, v int64) reaper.DrawCheck {
	t.Helper()
	c, err := reaper.VerifyDraw(context.Background(), e.DB, v, nil)
	require.NoError(t, err)
	return c
}

// Entries take no stock and one per user; after the end the reaper draws
// exactly min(stock, entries) winners, those the seed gives, reveals the
// seed, and the verification agrees; an altered winner fails it.
func TestADrawPicksTheWinnersItsSeedGives(t *testing.T) {
	e, v, seed, ends := seedDraw(t, 2, 5, nil)
	ctx := context.Background()
	ids := enter(t, e, v.ID, users("u", 12)...)
	_, err := testrdb.Admitter(e.RDB).Admit(ctx, admission.Claim{VoucherID: v.ID, UserID: "u3", Now: time.Now(), Day: order.Day(time.Now(), time.UTC)})
	require.ErrorIs(t, err, rdb.ErrAlreadyEntered)
	require.EqualValues(t, 5, redisStock(t, e, v.ID), "entries take no stock")
	persistVoucher(t, e, v.ID)
	require.Equal(t, int64(12), e.Count(t, "SELECT COUNT(*) FROM orders WHERE voucher_id = ? AND status = 'entered'", v.ID))
	require.Equal(t, int64(5), e.Count(t, "SELECT stock FROM vouchers WHERE id = ?", v.ID))

	// Before the end (and its grace) nothing is drawn.
	early := newReaper(t, e, "reaper-early", func() time.Time { return ends.Add(reaper.DrawGrace / 2) })
	round, err := early.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, round.Drawer.Drawn)

	r := newReaper(t, e, "reaper-1", func() time.Time { return ends.Add(reaper.DrawGrace + time.Second) })
	round, err = r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, round.Drawer.Drawn)
	require.Equal(t, 7, round.Drawer.MarkedLost)

	want := firstInDrawOrder(seed, ids, 5)
	require.ElementsMatch(t, want, idsWhere(t, e, v.ID, "status = 'created' AND drawn = 1"))
	require.Len(t, idsWhere(t, e, v.ID, "status = 'lost' AND drawn = 0"), 7)
	got, err := e.DB.Voucher(ctx, v.ID)
	require.NoError(t, err)
	require.Equal(t, draw.StateDrawn, got.DrawState)
	require.EqualValues(t, 5, got.DrawWinners)
	require.Zero(t, got.Stock, "the winners took the units")
	var ranked []int64
	require.NoError(t, e.DB.DB().Raw("SELECT id FROM orders WHERE voucher_id = ? AND draw_rank IS NOT NULL ORDER BY draw_rank", v.ID).Scan(&ranked).Error)
	require.Equal(t, firstInDrawOrder(seed, ids, 12), ranked, "MySQL's ranks are pkg/draw's order")

	c := verify(t, e, v.ID)
	require.True(t, c.OK, "%+v", c)
	require.True(t, c.CommitmentMatches)
	require.EqualValues(t, 12, c.Entries)
	require.EqualValues(t, 5, c.Winners)

	checks, err := reaper.Reconcile(ctx, e.RDB, e.DB, ends.Add(time.Minute), false)
	require.NoError(t, err)
	require.Empty(t, checks[0].Differences, "Redis counts one entry per user, whatever the draw made of it")

	again, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, again.Drawer.Drawn, "drawn once")

	// A winner swapped for a loser in MySQL: the verification fails.
	loser := idsWhere(t, e, v.ID, "status = 'lost'")[0]
	require.NoError(t, e.DB.DB().Exec("UPDATE orders SET status = 'lost', drawn = 0 WHERE id = ?", want[0]).Error)
	require.NoError(t, e.DB.DB().Exec("UPDATE orders SET status = 'created', drawn = 1 WHERE id = ?", loser).Error)
	c = verify(t, e, v.ID)
	require.False(t, c.OK)
	require.False(t, c.WinnersMatch)
}

// A draw with fewer entries than units: every entry wins, the rest of the
// stock stays unsold.
func TestADrawWithFewerEntriesThanUnits(t *testing.T) {
	e, v, _, ends := seedDraw(t, 1, 10, nil)
	ctx := context.Background()
	enter(t, e, v.ID, users("u", 3)...)
	persistVoucher(t, e, v.ID)
	r := newReaper(t, e, "reaper-1", func() time.Time { return ends.Add(time.Minute) })
	round, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, round.Drawer.Drawn)
	require.Equal(t, int64(3), e.Count(t, "SELECT COUNT(*) FROM orders WHERE voucher_id = ? AND status = 'created'", v.ID))
	require.Equal(t, int64(7), e.Count(t, "SELECT stock FROM vouchers WHERE id = ?", v.ID))
	require.True(t, verify(t, e, v.ID).OK)
}

// An entry still in the stream holds the draw back; one that reaches
// MySQL after the draw began fails (draw_closed) and gives the user's
// entry back in Redis, never stock.
func TestTheDrawWaitsForEntriesInFlightAndRefusesLateOnes(t *testing.T) {
	e, v, _, ends := seedDraw(t, 1, 2, nil)
	ctx := context.Background()
	enter(t, e, v.ID, "a", "b", "c")
	r := newReaper(t, e, "reaper-1", func() time.Time { return ends.Add(time.Minute) })
	round, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, round.Drawer.Drawn)
	require.Equal(t, 1, round.Drawer.DrawsWaiting, "three entries are in flight")
	persistVoucher(t, e, v.ID)

	late := enter(t, e, v.ID, "d") // a gateway whose clock is behind
	state, err := e.DB.BeginDraw(ctx, v.ID)
	require.NoError(t, err)
	require.Equal(t, draw.StateDrawing, state)
	persistVoucher(t, e, v.ID)
	row, err := e.DB.Order(ctx, late[0])
	require.NoError(t, err)
	require.Equal(t, string(order.StatusFailed), row.Status)
	require.Equal(t, db.ReasonDrawClosed, row.Reason)
	round, err = r.RunOnce(ctx) // draws, and settles the late entry's release
	require.NoError(t, err)
	require.Equal(t, 1, round.Drawer.Drawn)
	n, err := e.RDB.UserCount(ctx, v.ID, "d")
	require.NoError(t, err)
	require.Zero(t, n, "d's entry was given back")
	require.EqualValues(t, 2, redisStock(t, e, v.ID), "a draw's release gives no stock to Redis")
	c := verify(t, e, v.ID)
	require.True(t, c.OK)
	require.EqualValues(t, 3, c.Entries)
}

// Three reapers race to draw: one draws, the winners are the seed's.
func TestReapersRacingDrawOnce(t *testing.T) {
	e, v, seed, ends := seedDraw(t, 2, 40, nil)
	ids := enter(t, e, v.ID, users("u", 300)...)
	persistVoucher(t, e, v.ID)
	drawn := raceReapers(t, e, 3, ends.Add(time.Minute), func(r reaper.Results) int { return r.Drawer.Drawn })
	require.Equal(t, 1, drawn)
	require.ElementsMatch(t, firstInDrawOrder(seed, ids, 40), idsWhere(t, e, v.ID, "drawn = 1"))
	require.Equal(t, int64(260), e.Count(t, "SELECT COUNT(*) FROM orders WHERE voucher_id = ? AND status = 'lost'", v.ID))
	require.True(t, verify(t, e, v.ID).OK)
}

// A reaper killed after closing the entries, and another after the
// winners but before the losers: the next round finishes, same winners.
func TestADrawCutShortFinishesWithTheSameWinners(t *testing.T) {
	e, v, seed, ends := seedDraw(t, 1, 4, nil)
	ctx := context.Background()
	ids := enter(t, e, v.ID, users("u", 30)...)
	persistVoucher(t, e, v.ID)
	_, err := e.DB.BeginDraw(ctx, v.ID) // and died
	require.NoError(t, err)
	res, err := e.DB.Draw(ctx, v.ID, ends.Add(time.Minute))
	require.NoError(t, err)
	require.True(t, res.Drew)
	// Died before marking the losers: they are still entered.
	require.Equal(t, int64(26), e.Count(t, "SELECT COUNT(*) FROM orders WHERE voucher_id = ? AND status = 'entered'", v.ID))
	r := newReaper(t, e, "reaper-2", func() time.Time { return ends.Add(time.Minute) })
	round, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, round.Drawer.Drawn)
	require.Equal(t, 26, round.Drawer.MarkedLost)
	require.ElementsMatch(t, firstInDrawOrder(seed, ids, 4), idsWhere(t, e, v.ID, "drawn = 1"))
	require.True(t, verify(t, e, v.ID).OK)
}

// Winners who do not pay pass their unit down the waitlist in draw order,
// each once, with a fresh payment window; a cancelled winner's unit too;
// once the list runs out the units stay unsold, in MySQL's stock.
func TestTheWaitlistPassesUnpaidUnitsOnOnce(t *testing.T) {
	e, v, seed, ends := seedDraw(t, 1, 3, nil)
	ctx := context.Background()
	ids := enter(t, e, v.ID, users("u", 6)...)
	persistVoucher(t, e, v.ID)
	at := ends.Add(time.Minute)
	r := newReaper(t, e, "reaper-1", func() time.Time { return at })
	_, err := r.RunOnce(ctx)
	require.NoError(t, err)
	order6 := firstInDrawOrder(seed, ids, 6)
	// A waitlist longer than the draw ranked: forget the ranks past the
	// 4th, so that the second round must rank more (as a waitlist that
	// reaches the end of its first WaitlistBlock does).
	require.NoError(t, e.DB.DB().Exec("UPDATE orders SET draw_rank = NULL WHERE voucher_id = ? AND draw_rank > 4", v.ID).Error)
	owner := map[int64]string{}
	for i, id := range ids {
		owner[id] = fmt.Sprintf("u%d", i)
	}

	// The first winner pays; the second cancels: the 4th in the draw order gets it.
	_, err = e.DB.PayOrder(ctx, order6[0], owner[order6[0]], at)
	require.NoError(t, err)
	_, rel, err := e.DB.CancelOrder(ctx, order6[1], owner[order6[1]], at)
	require.NoError(t, err)
	require.Nil(t, rel, "a draw's unit owes Redis nothing")
	require.ElementsMatch(t, []int64{order6[3]}, idsWhere(t, e, v.ID, "drawn = 2 AND status = 'created'"))

	// The third winner and the 4th do not pay: the 5th and 6th get theirs.
	at = at.Add(2 * time.Minute)
	round, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, round.Expirer.Cancelled)
	require.ElementsMatch(t, []int64{order6[3], order6[4], order6[5]}, idsWhere(t, e, v.ID, "drawn = 2"))
	require.ElementsMatch(t, []int64{order6[4], order6[5]}, idsWhere(t, e, v.ID, "status = 'created'"))
	row, err := e.DB.Order(ctx, order6[4])
	require.NoError(t, err)
	require.Equal(t, at.Add(time.Minute), row.ExpiresAt.UTC(), "a fresh payment window")
	c := verify(t, e, v.ID)
	require.True(t, c.OK, "%+v", c)
	require.EqualValues(t, 3, c.WaitlistPassed)

	// Nobody is left: the two units go back to stock, unsold.
	at = at.Add(2 * time.Minute)
	round, err = r.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, round.Expirer.Cancelled)
	require.Equal(t, int64(2), e.Count(t, "SELECT stock FROM vouchers WHERE id = ?", v.ID))
	require.Equal(t, int64(1), e.Count(t, "SELECT COUNT(*) FROM orders WHERE voucher_id = ? AND status = 'paid'", v.ID))
	require.Zero(t, e.Count(t, "SELECT COUNT(*) FROM orders WHERE voucher_id = ? AND status IN ('created', 'lost', 'entered')", v.ID))
	again, err := r.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, again.Expirer.Cancelled)
	require.Equal(t, int64(2), e.Count(t, "SELECT stock FROM vouchers WHERE id = ?", v.ID), "units conserved: 1 paid + 2 unsold = 3")
	require.True(t, verify(t, e, v.ID).OK)
	f, err := e.DB.DrawFiguresOf(ctx, v.ID)
	require.NoError(t, err)
	require.Equal(t, db.DrawFigures{Entries: 6, Passed: 3, Paid: 1}, f, "what GET …/draw shows")
}

// A codes draw hands each winner a distinct code; a code nobody paid for
// goes, with its unit, to the next entry.
func TestACodesDrawGivesEachWinnerADistinctCode(t *testing.T) {
	items := []order.Item{{No: 1, Code: "A1"}, {No: 2, Code: "B2"}, {No: 3, Code: "C3"}}
	e, v, seed, ends := seedDraw(t, 1, 0, items)
	ctx := context.Background()
	ids := enter(t, e, v.ID, users("u", 8)...)
	persistVoucher(t, e, v.ID)
	at := ends.Add(time.Minute)
	r := newReaper(t, e, "reaper-1", func() time.Time { return at })
	_, err := r.RunOnce(ctx)
	require.NoError(t, err)
	order8 := firstInDrawOrder(seed, ids, 8)
	codes := map[string]int64{}
	for k, id := range order8[:3] {
		row, err := e.DB.Order(ctx, id)
		require.NoError(t, err)
		require.Equal(t, items[k].Code, row.Code, "the k-th winner gets the k-th code")
		codes[row.Code] = id
		require.Equal(t, int64(1), e.Count(t, "SELECT COUNT(*) FROM items WHERE voucher_id = ? AND order_id = ? AND code = ?", v.ID, id, row.Code))
	}
	require.Len(t, codes, 3)

	at = at.Add(2 * time.Minute) // nobody paid: the next three get the same codes
	_, err = r.RunOnce(ctx)
	require.NoError(t, err)
	for k, id := range order8[3:6] {
		row, err := e.DB.Order(ctx, id)
		require.NoError(t, err)
		require.Equal(t, string(order.StatusCreated), row.Status)
		require.Equal(t, items[k].Code, row.Code, "the best placed winner's code to the best placed waiting entry")
		require.Equal(t, int64(1), e.Count(t, "SELECT COUNT(*) FROM items WHERE voucher_id = ? AND order_id = ? AND code = ?", v.ID, id, row.Code))
	}
	require.True(t, verify(t, e, v.ID).OK)
}
