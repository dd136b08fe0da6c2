package db

// Draw sales (pkg/draw) in MySQL: entries persisted like orders, the draw
// run once under the voucher's row lock, and the waitlist that passes a
// unit nobody paid for to the next entry in the draw order.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/flashsale/flashsale/pkg/draw"
	"github.com/flashsale/flashsale/pkg/order"
)

// allotEntries takes draw voucher v's row lock and decides which of its
// just inserted entries idx stay: none once the draw has begun (the draw
// counts the entries it found), and one per user (any entry the user has
// that did not fail counts). They take no stock. It returns the ones that
// must fail, with status and reason set.
func allotEntries(tx *gorm.DB, v int64, _ voucherMeta, rows []Order, idx []int) ([]Order, error) {
	var state string
	if err := tx.Raw("SELECT draw_state FROM vouchers WHERE id = ? FOR UPDATE", v).Scan(&state).Error; err != nil {
		return nil, fmt.Errorf("lock voucher %d: %w", v, err)
	}
	users := make([]string, len(idx))
	for j, i := range idx {
		users[j] = rows[i].UserID
	}
	var counts []struct {
		UserID string
		N      int64
	}
	if err := tx.Raw(`SELECT user_id, COUNT(*) AS n FROM orders WHERE voucher_id = ? AND user_id IN ? AND status <> ? GROUP BY user_id`,
		v, users, order.StatusFailed).Scan(&counts).Error; err != nil {
		return nil, fmt.Errorf("count entries per user of voucher %d: %w", v, err)
	}
	held := make(map[string]int64, len(counts))
	for _, c := range counts {
		held[c.UserID] = c.N
	}
	for _, i := range idx { // this batch's rows are counted: what each user had before
		held[rows[i].UserID]--
	}
	var refused []Order
	for _, i := range idx {
		r := &rows[i]
		switch {
		case state != draw.StateOpen:
			r.Status, r.Reason = string(order.StatusFailed), ReasonDrawClosed
		case held[r.UserID] >= 1:
			r.Status, r.Reason = string(order.StatusFailed), ReasonUserLimit
		default:
			held[r.UserID]++
			continue
		}
		refused = append(refused, *r)
	}
	return refused, nil
}

// DrawsDue returns up to limit draw vouchers whose sale ended at or before
// endedBy and whose draw is not finished: not drawn, or drawn with entries
// not yet marked lost.
func (s *Store) DrawsDue(ctx context.Context, endedBy time.Time, limit int) ([]Voucher, error) {
	var out []Voucher
	err := s.db.WithContext(ctx).Where("allocation = ? AND ends_at <= ?", draw.Draw, endedBy).
		Where("draw_state IN ? OR (draw_state = ? AND EXISTS (SELECT 1 FROM orders WHERE orders.voucher_id = vouchers.id AND orders.status = ?))",
			[]string{draw.StateOpen, draw.StateDrawing}, draw.StateDrawn, order.StatusEntered).
		Order("id").Limit(limit).Find(&out).Error
	return out, err
}

// BeginDraw closes draw voucher v to entries (open → drawing, under its row
// lock: an entry persisted after it fails with draw_closed) and returns
// its state afterwards. Call it once every entry admitted before the end
// is persisted.
func (s *Store) BeginDraw(ctx context.Context, v int64) (string, error) {
	var state string
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Raw("SELECT draw_state FROM vouchers WHERE id = ? FOR UPDATE", v).Scan(&state).Error; err != nil {
			return fmt.Errorf("lock voucher %d: %w", v, err)
		}
		if state != draw.StateOpen {
			return nil
		}
		state = draw.StateDrawing
		return tx.Exec("UPDATE vouchers SET draw_state = ? WHERE id = ?", state, v).Error
	}, readCommitted)
	return state, err
}

// DrawResult is what a call of Draw came to.
type DrawResult struct {
	Drew    bool  // this call drew (another, or an earlier, call did otherwise)
	Entries int64 // entries in the draw
	Winners int64
}

// ErrNotDrawing says that Draw was called on a voucher whose draw has not begun.
var ErrNotDrawing = errors.New("the draw has not begun")

// WaitlistBlock is how many entries of the waitlist the draw ranks beyond
// the winners, and how many more a waitlist that reaches the end of its
// ranks ranks at once (at least 1,000; as many as the winners if more).
func WaitlistBlock(winners int64) int64 { return max(winners, 1000) }

// Draw draws the winners of voucher v, whose draw has begun (BeginDraw),
// by the procedure of pkg/draw: it streams the entries' ids once, keeping
// the first min(stock, entries) + WaitlistBlock in draw order (memory
// bounded by those), then in one transaction, under the row lock and
// only while the state is drawing, writes their ranks, makes the winners
// created orders with a payment window from now (a codes sale gives them
// its free codes, the k-th winner the k-th code), takes their units from
// the stock and sets the state drawn. Safe to repeat and to run in
// several reapers at once: the draw depends on the seed and the entries
// only, and one transaction commits it. The entries that lost are marked
// by MarkLost.
func (s *Store) Draw(ctx context.Context, v int64, now time.Time) (DrawResult, error) {
	var res DrawResult
	vr, err := s.Voucher(ctx, v)
	if err != nil {
		return res, err
	}
	switch vr.DrawState {
	case draw.StateDrawn:
		return DrawResult{Winners: vr.DrawWinners}, nil
	case draw.StateDrawing:
	default:
		return res, fmt.Errorf("voucher %d: %w (state %q)", v, ErrNotDrawing, vr.DrawState)
	}
	seed, err := draw.ParseSeed(vr.DrawSeed)
	if err != nil {
		return res, fmt.Errorf("voucher %d: %w", v, err)
	}
	db := s.db.WithContext(ctx)
	if err := db.Model(&Order{}).Where("voucher_id = ? AND status = ?", v, order.StatusEntered).Count(&res.Entries).Error; err != nil {
		return res, err
	}
	res.Winners = min(vr.Stock, res.Entries)
	first := draw.NewFirst(seed, int(min(res.Entries, res.Winners+WaitlistBlock(res.Winners))))
	if err := eachID(db, first.Add, "SELECT id FROM orders WHERE voucher_id = ? AND status = ?", v, order.StatusEntered); err != nil {
		return res, err
	}
	ranked := first.Sorted()
	err = db.Transaction(func(tx *gorm.DB) error {
		var row struct {
			Stock                 int64
			DrawState             string
			PaymentTimeoutSeconds int64
		}
		if err := tx.Raw("SELECT stock, draw_state, payment_timeout_seconds FROM vouchers WHERE id = ? FOR UPDATE", v).Scan(&row).Error; err != nil {
			return fmt.Errorf("lock voucher %d: %w", v, err)
		}
		if row.DrawState != draw.StateDrawing {
			return nil // drawn by another reaper meanwhile
		}
		if row.Stock != vr.Stock {
			return fmt.Errorf("voucher %d: stock changed during the draw (%d, then %d)", v, vr.Stock, row.Stock)
		}
		if err := writeRanks(tx, ranked, 0); err != nil {
			return err
		}
		expires := now.Add(time.Duration(row.PaymentTimeoutSeconds) * time.Second)
		q := tx.Exec(`UPDATE orders SET status = ?, drawn = 1, expires_at = ?, updated_at = ?
			WHERE voucher_id = ? AND status = ? AND draw_rank <= ?`,
			order.StatusCreated, expires, now, v, order.StatusEntered, res.Winners)
		if q.Error != nil {
			return fmt.Errorf("make the winners of voucher %d: %w", v, q.Error)
		}
		if q.RowsAffected != res.Winners {
			return fmt.Errorf("voucher %d: %d winners made, %d wanted", v, q.RowsAffected, res.Winners)
		}
		if err := giveWinnersItems(tx, v); err != nil {
			return err
		}
		if err := recordEventsWhere(tx, "voucher_id = ? AND drawn = 1 AND status = ?", v, order.StatusCreated); err != nil {
			return err
		}
		res.Drew = true
		return tx.Exec("UPDATE vouchers SET stock = stock - ?, draw_state = ?, drawn_at = ?, draw_winners = ? WHERE id = ?",
			res.Winners, draw.StateDrawn, now, res.Winners, v).Error
	}, readCommitted)
	return res, err
}

// eachID streams the ids query selects to fn.
func eachID(db *gorm.DB, fn func(int64), query string, args ...any) error {
	rows, err := db.Raw(query, args...).Rows()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return err
		}
		fn(id)
	}
	return rows.Err()
}

// writeRanks gives ranked (in draw order) the ranks after, after+1, ...,
// 1,000 rows a statement.
func writeRanks(tx *gorm.DB, ranked []draw.Ranked, after int64) error {
	for i := 0; i < len(ranked); i += 1000 {
		chunk := ranked[i:min(i+1000, len(ranked))]
		var b strings.Builder
		args := make([]any, 0, 3*len(chunk))
		ids := make([]int64, len(chunk))
		b.WriteString("UPDATE orders SET draw_rank = CASE id")
		for j, r := range chunk {
			b.WriteString(" WHEN ? THEN ?")
			args = append(args, r.ID, after+int64(i+j)+1)
			ids[j] = r.ID
		}
		b.WriteString(" END WHERE id IN ?")
		if err := tx.Exec(b.String(), append(args, ids)...).Error; err != nil {
			return fmt.Errorf("rank %d entries: %w", len(chunk), err)
		}
	}
	return nil
}

// giveWinnersItems gives the winners of pooled voucher v (drawn = 1), in
// draw order, its free items in item order: the k-th winner the k-th item.
// A voucher of units has no items: nothing is changed.
func giveWinnersItems(tx *gorm.DB, v int64) error {
	err := tx.Exec(`UPDATE orders o
		JOIN (SELECT id, ROW_NUMBER() OVER (ORDER BY draw_rank) AS rn FROM orders WHERE voucher_id = ? AND drawn = 1) w ON w.id = o.id
		JOIN (SELECT item, amount, code, ROW_NUMBER() OVER (ORDER BY item) AS rn FROM items
			WHERE voucher_id = ? AND order_id IS NULL AND refunded = 0) f ON f.rn = w.rn
		SET o.item = f.item, o.amount = f.amount, o.code = f.code`, v, v).Error
	if err != nil {
		return fmt.Errorf("give the winners of voucher %d their items: %w", v, err)
	}
	err = tx.Exec(`UPDATE items i JOIN orders o ON o.voucher_id = i.voucher_id AND o.item = i.item AND o.drawn = 1
		SET i.order_id = o.id, i.user_id = o.user_id WHERE i.voucher_id = ? AND o.voucher_id = ?`, v, v).Error
	if err != nil {
		return fmt.Errorf("hand voucher %d's items to its winners: %w", v, err)
	}
	return nil
}

// MarkLost marks up to limit entries of drawn voucher v that did not win
// as lost, with their events, and returns how many it marked (0 when none
// is left). Entries another transaction holds are left for later; two
// reapers' markings that deadlock (the victim rolled back whole) are
// tried again.
func (s *Store) MarkLost(ctx context.Context, v int64, now time.Time, limit int) (int64, error) {
	var n int64
	err := retryDeadlock(func() error {
		n = 0
		return s.markLost(ctx, v, now, limit, &n)
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

func (s *Store) markLost(ctx context.Context, v int64, now time.Time, limit int, n *int64) error {
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var ids []int64
		if err := tx.Raw(`SELECT id FROM orders WHERE voucher_id = ? AND status = ?
			AND EXISTS (SELECT 1 FROM vouchers WHERE id = ? AND draw_state = ?) ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED`,
			v, order.StatusEntered, v, draw.StateDrawn, limit).Scan(&ids).Error; err != nil {
			return fmt.Errorf("find the lost entries of voucher %d: %w", v, err)
		}
		if len(ids) == 0 {
			return nil
		}
		q := tx.Exec("UPDATE orders SET status = ?, updated_at = ? WHERE id IN ? AND status = ?", order.StatusLost, now, ids, order.StatusEntered)
		if q.Error != nil {
			return fmt.Errorf("mark the entries of voucher %d lost: %w", v, q.Error)
		}
		if q.RowsAffected != int64(len(ids)) {
			return fmt.Errorf("mark lost: %d of %d locked entries changed", q.RowsAffected, len(ids))
		}
		*n = q.RowsAffected
		return recordEvents(tx, ids, "")
	}, readCommitted)
}

// passOn gives the units of draw voucher v's winners gone (cancelled in
// this transaction) to the first entries of its waitlist, in draw order,
// each with a fresh payment window from now and the item the gone winner
// held; a unit the list is too short for goes back to MySQL's stock,
// unsold (the sale is over: Redis sells nothing more). The voucher's row
// lock makes two reapers pass each unit on once.
func passOn(tx *gorm.DB, v int64, gone []Order, now time.Time) error {
	var row struct {
		PaymentTimeoutSeconds int64
		DrawSeed              string
	}
	if err := tx.Raw("SELECT payment_timeout_seconds, draw_seed FROM vouchers WHERE id = ? FOR UPDATE", v).Scan(&row).Error; err != nil {
		return fmt.Errorf("lock voucher %d: %w", v, err)
	}
	next, err := waitlistHead(tx, v, row.DrawSeed, len(gone))
	if err != nil {
		return err
	}
	// The best placed winner's unit (and code) to the best placed entry
	// of the waitlist, whatever order the cancellations came in.
	gone = slices.Clone(gone)
	slices.SortStableFunc(gone, func(a, b Order) int { return cmp.Compare(rankOf(a), rankOf(b)) })
	expires := now.Add(time.Duration(row.PaymentTimeoutSeconds) * time.Second)
	var unsold int64
	var freed []int64
	for i, o := range gone {
		if i >= len(next) {
			unsold += o.Quantity
			freed = append(freed, o.ID)
			continue
		}
		n := next[i]
		if err := tx.Exec(`UPDATE orders SET status = ?, drawn = 2, expires_at = ?, updated_at = ?, item = ?, amount = ?, code = ?
			WHERE id = ? AND status IN ?`, order.StatusCreated, expires, now, o.Item, o.Amount, o.Code, n.ID, notDrawn).Error; err != nil {
			return fmt.Errorf("pass order %d's unit to entry %d: %w", o.ID, n.ID, err)
		}
		if err := recordEvents(tx, []int64{n.ID}, ""); err != nil {
			return err
		}
		if o.Item > 0 {
			if err := tx.Exec("UPDATE items SET order_id = ?, user_id = ? WHERE voucher_id = ? AND item = ?", n.ID, n.UserID, v, o.Item).Error; err != nil {
				return fmt.Errorf("pass item %d to entry %d: %w", o.Item, n.ID, err)
			}
		}
	}
	if unsold > 0 {
		if err := tx.Exec("UPDATE vouchers SET stock = stock + ? WHERE id = ?", unsold, v).Error; err != nil {
			return fmt.Errorf("return %d unsold units to voucher %d: %w", unsold, v, err)
		}
		return freeItems(tx, freed)
	}
	return nil
}

// rankOf is o's place in its draw (unranked last).
func rankOf(o Order) int64 {
	if o.DrawRank == nil {
		return math.MaxInt64
	}
	return *o.DrawRank
}

// notDrawn are the statuses of an entry of a drawn voucher that has had no
// unit: lost, or entered while MarkLost has not reached it yet.
var notDrawn = []order.Status{order.StatusLost, order.StatusEntered}

// waitlistHead locks and returns the first n entries of drawn voucher v's
// waitlist, in draw order (by rank: the orders_draw_rank index). When the
// ranked entries run out before n, the next WaitlistBlock of the entries
// not ranked yet are ranked (streaming them once, under seed), until n
// are found or none is left.
func waitlistHead(tx *gorm.DB, v int64, seedHex string, n int) ([]Order, error) {
	for {
		var head []Order
		if err := tx.Raw(`SELECT id, user_id FROM orders WHERE voucher_id = ? AND draw_rank IS NOT NULL AND status IN ?
			ORDER BY draw_rank LIMIT ? FOR UPDATE`, v, notDrawn, n).Scan(&head).Error; err != nil {
			return nil, fmt.Errorf("waitlist of voucher %d: %w", v, err)
		}
		if len(head) == n {
			return head, nil
		}
		more, err := rankMore(tx, v, seedHex, int64(n-len(head)))
		if err != nil || !more {
			return head, err
		}
	}
}

// rankMore ranks the next entries of drawn voucher v's waitlist that have
// no rank yet (at least want, WaitlistBlock of the winners if more): the
// first of the unranked in draw order, which all come after the ranked
// ones. It reports whether any was left to rank.
func rankMore(tx *gorm.DB, v int64, seedHex string, want int64) (bool, error) {
	seed, err := draw.ParseSeed(seedHex)
	if err != nil {
		return false, fmt.Errorf("voucher %d: %w", v, err)
	}
	var last struct {
		MaxRank int64
		Winners int64
	}
	if err := tx.Raw(`SELECT (SELECT COALESCE(MAX(draw_rank), 0) FROM orders WHERE voucher_id = ?) AS max_rank,
		draw_winners AS winners FROM vouchers WHERE id = ?`, v, v).Scan(&last).Error; err != nil {
		return false, err
	}
	first := draw.NewFirst(seed, int(max(want, WaitlistBlock(last.Winners))))
	if err := eachID(tx, first.Add, "SELECT id FROM orders WHERE voucher_id = ? AND status IN ? AND draw_rank IS NULL", v, notDrawn); err != nil {
		return false, err
	}
	ranked := first.Sorted()
	if len(ranked) == 0 {
		return false, nil
	}
	return true, writeRanks(tx, ranked, last.MaxRank)
}

// EachEntry calls fn with the id of every entry of draw voucher v that
// did not fail (those the draw ranked), in id order, streaming the rows.
func (s *Store) EachEntry(ctx context.Context, v int64, fn func(id int64)) error {
	err := eachID(s.db.WithContext(ctx), fn, "SELECT id FROM orders WHERE voucher_id = ? AND status <> ? ORDER BY id", v, order.StatusFailed)
	if err != nil {
		return fmt.Errorf("entries of voucher %d: %w", v, err)
	}
	return nil
}

// DrawFigures are a draw's counts, as the API shows them: entries that
// did not fail, units the waitlist passed on, orders of the draw paid.
type DrawFigures struct {
	Entries, Passed, Paid int64
}

// DrawFiguresOf counts voucher v's DrawFigures in one read.
func (s *Store) DrawFiguresOf(ctx context.Context, v int64) (DrawFigures, error) {
	var f DrawFigures
	err := s.db.WithContext(ctx).Raw(`SELECT COUNT(*) AS entries, COALESCE(SUM(drawn = 2), 0) AS passed,
		COALESCE(SUM(drawn > 0 AND status = ?), 0) AS paid FROM orders WHERE voucher_id = ? AND status <> ?`,
		order.StatusPaid, v, order.StatusFailed).Scan(&f).Error
	return f, err
}

// DrawRecord is what MySQL recorded of voucher v's draw, as verifying it
// needs it: the entries that won at the draw, those the waitlist gave a
// unit to, and those ranked (the winners and the waitlist's head), in
// rank order.
type DrawRecord struct {
	Won, Passed, Ranked []int64
}

// DrawRecordOf reads voucher v's DrawRecord.
func (s *Store) DrawRecordOf(ctx context.Context, v int64) (DrawRecord, error) {
	var rec DrawRecord
	var rows []struct {
		ID    int64
		Drawn int
	}
	db := s.db.WithContext(ctx)
	if err := db.Raw("SELECT id, drawn FROM orders WHERE voucher_id = ? AND drawn > 0 ORDER BY id", v).Scan(&rows).Error; err != nil {
		return rec, err
	}
	if err := db.Raw("SELECT id FROM orders WHERE voucher_id = ? AND draw_rank IS NOT NULL ORDER BY draw_rank", v).Scan(&rec.Ranked).Error; err != nil {
		return rec, err
	}
	for _, r := range rows {
		if r.Drawn == 1 {
			rec.Won = append(rec.Won, r.ID)
		} else {
			rec.Passed = append(rec.Passed, r.ID)
		}
	}
	return rec, nil
}
