package db

// The outbox of order events (sql/0015_events.sql, docs/EVENTS.md): each
// transaction that takes orders to a status writes their events with the
// change, one row of up to MaxEventsPerRow, so an event exists if and
// only if its change committed and a worker's batch costs one row. The
// reaper gives committed rows their sequences (SequenceEvents), which the
// sinks publish in.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"gorm.io/gorm"

	"github.com/flashsale/flashsale/pkg/jsonstr"
)

// MaxEventsPerRow bounds the events of one outbox row: a reader finds
// the row holding a sequence among the rows whose first sequence is at
// most this much below it.
const MaxEventsPerRow = 1000

// Snapshot is what an event says: an order as a change left it, and why
// (a cancellation's, a failure's reason), or, with Split set, a voucher's
// split (then only VoucherID is set beside it). A row holds its events'
// snapshots as a JSON array of arrays, one per event: an order's in the
// order of snapshotFields, a split's as SplitTag, the voucher, its
// buckets and when (unix ms) (encodeSnapshots): a worker's batch writes
// hundreds.
type Snapshot struct {
	Split     *Split
	OrderID   int64
	VoucherID int64
	UserID    string
	Status    string
	Reason    string
	Quantity  int64
	Amount    int64
	Code      string
	Drawn     int
	CreatedAt time.Time
	ExpiresAt time.Time
	PaidAt    *time.Time
}

// Split is a voucher's split, done: its Redis buckets are Buckets from At.
type Split struct {
	Buckets int
	At      time.Time
}

// SplitTag begins a split's snapshot in a row, where an order's begins
// with its id: a string, so the reader tells them apart by the first token.
const SplitTag = "voucher.split"

// snapshotFields is a snapshot's layout in a row: times in unix
// milliseconds, paid_at 0 when unpaid.
const snapshotFields = 12 // order, voucher, user, status, reason, quantity, amount, code, drawn, created, expires, paid

// encodeSnapshots is snaps as a row holds them, written by hand: a
// worker's batch encodes hundreds, and reflection cost more than the
// INSERT.
func encodeSnapshots(snaps []Snapshot) []byte {
	b := make([]byte, 0, 16+96*len(snaps))
	b = append(b, '[')
	for i, s := range snaps {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		if s.Split != nil {
			b = jsonstr.Append(b, SplitTag)
			b = strconv.AppendInt(append(b, ','), s.VoucherID, 10)
			b = strconv.AppendInt(append(b, ','), int64(s.Split.Buckets), 10)
			b = strconv.AppendInt(append(b, ','), s.Split.At.UnixMilli(), 10)
			b = append(b, ']')
			continue
		}
		b = strconv.AppendInt(b, s.OrderID, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, s.VoucherID, 10)
		b = jsonstr.Append(append(b, ','), s.UserID)
		b = jsonstr.Append(append(b, ','), s.Status)
		b = jsonstr.Append(append(b, ','), s.Reason)
		b = strconv.AppendInt(append(b, ','), s.Quantity, 10)
		b = strconv.AppendInt(append(b, ','), s.Amount, 10)
		b = jsonstr.Append(append(b, ','), s.Code)
		b = strconv.AppendInt(append(b, ','), int64(s.Drawn), 10)
		b = strconv.AppendInt(append(b, ','), s.CreatedAt.UnixMilli(), 10)
		b = strconv.AppendInt(append(b, ','), s.ExpiresAt.UnixMilli(), 10)
		var paid int64
		if s.PaidAt != nil {
			paid = s.PaidAt.UnixMilli()
		}
		b = strconv.AppendInt(append(b, ','), paid, 10)
		b = append(b, ']')
	}
	return append(b, ']')
}

// decodeSnapshots reads a row's snapshots with jsontext's tokenizer
// (encoding/json/v2's): BenchmarkSnapshotCodecs measured it as fast as a
// reader written by hand (kept beside the benchmark), in far fewer lines
// of ours. It is strict: the
// layout encodeSnapshots writes, integers without fraction or exponent,
// valid UTF-8, nothing after the array.
func decodeSnapshots(raw []byte) ([]Snapshot, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(raw))
	k := -1 // the event being read
	fail := func(err error) error {
		if k < 0 {
			return fmt.Errorf("events: %w", err)
		}
		return fmt.Errorf("event %d: %w", k, err)
	}
	delim := func(want jsontext.Kind) error {
		t, err := dec.ReadToken()
		if err == nil && t.Kind() != want {
			err = fmt.Errorf("%v at byte %d, where %v is due", t.Kind(), dec.InputOffset(), want)
		}
		return err
	}
	if err := delim('['); err != nil {
		return nil, fail(err)
	}
	out := make([]Snapshot, 0, bytes.Count(raw, []byte{'['})-1)
	for dec.PeekKind() == '[' {
		k = len(out)
		if err := delim('['); err != nil {
			return nil, fail(err)
		}
		if dec.PeekKind() == '"' {
			s, err := decodeSplit(dec)
			if err != nil {
				return nil, fail(err)
			}
			out = append(out, s)
			continue
		}
		var s Snapshot
		var n [snapshotFields]int64
		strs := [snapshotFields]*string{2: &s.UserID, 3: &s.Status, 4: &s.Reason, 7: &s.Code}
		for f := range snapshotFields {
			if strs[f] != nil {
				t, err := dec.ReadToken()
				if err == nil && t.Kind() != '"' {
					err = fmt.Errorf("field %d is not a string", f)
				}
				if err != nil {
					return nil, fail(err)
				}
				*strs[f] = t.String()
				continue
			}
			v, err := dec.ReadValue()
			if err != nil {
				return nil, fail(err)
			}
			var ok bool
			if n[f], ok = jsonInt(v); !ok {
				return nil, fail(fmt.Errorf("field %d is not an integer: %s", f, v))
			}
		}
		if err := delim(']'); err != nil {
			return nil, fail(fmt.Errorf("not %d fields: %w", snapshotFields, err))
		}
		s.setNumbers(n[0], n[1], n[5], n[6], n[8], n[9], n[10], n[11])
		out = append(out, s)
	}
	k = -1
	if err := delim(']'); err != nil {
		return nil, fail(err)
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return nil, fail(fmt.Errorf("data after the array (%v)", err))
	}
	return out, nil
}

// decodeSplit reads the rest of a split's snapshot, its opening bracket
// read: SplitTag, the voucher, its buckets, when (unix ms), the closing
// bracket.
func decodeSplit(dec *jsontext.Decoder) (Snapshot, error) {
	t, err := dec.ReadToken()
	if err != nil {
		return Snapshot{}, err
	}
	if tag := t.String(); tag != SplitTag {
		return Snapshot{}, fmt.Errorf("an event of kind %q", tag)
	}
	var n [3]int64
	for f := range n {
		v, err := dec.ReadValue()
		if err != nil {
			return Snapshot{}, err
		}
		var ok bool
		if n[f], ok = jsonInt(v); !ok {
			return Snapshot{}, fmt.Errorf("split field %d is not an integer: %s", f+1, v)
		}
	}
	if t, err := dec.ReadToken(); err != nil || t.Kind() != ']' {
		return Snapshot{}, fmt.Errorf("a split is not 4 fields (%v)", err)
	}
	return Snapshot{VoucherID: n[0], Split: &Split{Buckets: int(n[1]), At: time.UnixMilli(n[2]).UTC()}}, nil
}

// setNumbers sets s's numeric fields from a row's: times in unix
// milliseconds, paid 0 when unpaid.
func (s *Snapshot) setNumbers(order, voucher, quantity, amount, drawn, created, expires, paid int64) {
	s.OrderID, s.VoucherID, s.Quantity, s.Amount, s.Drawn = order, voucher, quantity, amount, int(drawn)
	s.CreatedAt, s.ExpiresAt = time.UnixMilli(created).UTC(), time.UnixMilli(expires).UTC()
	if paid != 0 {
		t := time.UnixMilli(paid).UTC()
		s.PaidAt = &t
	}
}

// jsonInt reads a JSON value as an int64: a number without fraction or
// exponent that fits (what encoding/json reads into an int64).
func jsonInt(v []byte) (int64, bool) {
	neg := len(v) > 0 && v[0] == '-'
	if neg {
		v = v[1:]
	}
	if len(v) == 0 || len(v) > 19 {
		return 0, false
	}
	var u uint64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return -int64(u), true
	}
	if u > 1<<63-1 {
		return 0, false
	}
	return int64(u), true
}

// Order is the order as the snapshot's change left it.
func (s Snapshot) Order() Order {
	return Order{ID: s.OrderID, VoucherID: s.VoucherID, UserID: s.UserID, Quantity: s.Quantity, Amount: s.Amount, Code: s.Code,
		Status: s.Status, Reason: s.Reason, CreatedAt: s.CreatedAt, ExpiresAt: s.ExpiresAt, PaidAt: s.PaidAt, Drawn: s.Drawn}
}

func snapshotOf(o Order, reason string) Snapshot {
	if reason == "" {
		reason = o.Reason
	}
	return Snapshot{OrderID: o.ID, VoucherID: o.VoucherID, UserID: o.UserID, Status: o.Status, Reason: reason, Quantity: o.Quantity,
		Amount: o.Amount, Code: o.Code, Drawn: o.Drawn, CreatedAt: o.CreatedAt, ExpiresAt: o.ExpiresAt, PaidAt: o.PaidAt}
}

// OutboxEvent is one event as the outbox holds it: its order's snapshot, where it
// stands (its row, its place in it) and, once sequenced, its sequence.
type OutboxEvent struct {
	Snapshot
	Row        int64
	K          int
	Sequence   int64 // 0: not sequenced yet
	OccurredAt time.Time
}

// ID is the event's id, the same every time it is read.
func (e OutboxEvent) ID() string { return strconv.FormatInt(e.Row, 10) + "." + strconv.Itoa(e.K) }

// eventRow is a row of events.
type eventRow struct {
	ID         int64
	Sequence   *int64
	N          int
	Events     []byte
	OccurredAt time.Time
}

// expand is the row's events.
func (r eventRow) expand() ([]OutboxEvent, error) {
	snaps, err := decodeSnapshots(r.Events)
	if err != nil {
		return nil, fmt.Errorf("events row %d: %w", r.ID, err)
	}
	if len(snaps) != r.N {
		return nil, fmt.Errorf("events row %d: %d events, n says %d", r.ID, len(snaps), r.N)
	}
	out := make([]OutboxEvent, len(snaps))
	for k, s := range snaps {
		out[k] = OutboxEvent{Snapshot: s, Row: r.ID, K: k, OccurredAt: r.OccurredAt}
		if r.Sequence != nil {
			out[k].Sequence = *r.Sequence + int64(k)
		}
	}
	return out, nil
}

// insertEvents writes, in tx, the events of orders as they are in
// memory, the change's new state: rows of up to MaxEventsPerRow.
func insertEvents(tx *gorm.DB, orders []Order, reason string) error {
	for i := 0; i < len(orders); i += MaxEventsPerRow {
		chunk := orders[i:min(i+MaxEventsPerRow, len(orders))]
		snaps := make([]Snapshot, len(chunk))
		for k, o := range chunk {
			snaps[k] = snapshotOf(o, reason)
		}
		if err := insertSnapshots(tx, snaps); err != nil {
			return err
		}
	}
	return nil
}

// insertSnapshots writes, in tx, one row of events saying snaps.
func insertSnapshots(tx *gorm.DB, snaps []Snapshot) error {
	if err := tx.Exec("INSERT INTO events (n, events, occurred_at) VALUES (?, ?, UTC_TIMESTAMP(3))", len(snaps), encodeSnapshots(snaps)).Error; err != nil {
		return fmt.Errorf("record %d events: %w", len(snaps), err)
	}
	return nil
}

// recordEvents writes, in tx, the events of the orders ids as they are
// now in tx (their new status), with reason (""; the orders' own). Call
// it after the change, in the change's transaction.
func recordEvents(tx *gorm.DB, ids []int64, reason string) error {
	if len(ids) == 0 {
		return nil
	}
	var rows []Order
	if err := tx.Where("id IN ?", ids).Order("id").Find(&rows).Error; err != nil {
		return fmt.Errorf("read %d changed orders: %w", len(ids), err)
	}
	if len(rows) != len(ids) {
		return fmt.Errorf("record events: %d of %d orders found", len(rows), len(ids))
	}
	return insertEvents(tx, rows, reason)
}

// recordEventsWhere is recordEvents of the orders a condition selects
// (those the change just made, in tx).
func recordEventsWhere(tx *gorm.DB, where string, args ...any) error {
	var rows []Order
	if err := tx.Where(where, args...).Order("id").Find(&rows).Error; err != nil {
		return fmt.Errorf("read changed orders: %w", err)
	}
	return insertEvents(tx, rows, "")
}

// SequenceEvents gives up to limit committed rows of events without a
// sequence the next sequences, in the order they were written, and
// returns how many events it sequenced. event_sequence's row lock makes
// several reapers sequence one after another: the sequences given are
// 1, 2, 3, ... with no gap and none twice. Events written by a
// transaction still open are sequenced by a later call. With nothing to
// sequence (the usual answer to the sequencer's pass and to an idle
// relay's poll) it takes no lock: one read of the sequence index.
func (s *Store) SequenceEvents(ctx context.Context, limit int) (int, error) {
	var waiting []int64
	if err := s.db.WithContext(ctx).Raw("SELECT id FROM events WHERE sequence IS NULL LIMIT 1").Scan(&waiting).Error; err != nil {
		return 0, fmt.Errorf("find unsequenced events: %w", err)
	}
	if len(waiting) == 0 {
		return 0, nil
	}
	n := 0
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var last int64
		if err := tx.Raw("SELECT last FROM event_sequence WHERE id = 1 FOR UPDATE").Scan(&last).Error; err != nil {
			return fmt.Errorf("lock the event sequence: %w", err)
		}
		var rows []struct{ ID, N int64 }
		if err := tx.Raw("SELECT id, n FROM events WHERE sequence IS NULL ORDER BY id LIMIT ?", limit).Scan(&rows).Error; err != nil {
			return fmt.Errorf("find unsequenced events: %w", err)
		}
		if len(rows) == 0 {
			return nil
		}
		var b strings.Builder
		args := make([]any, 0, 2*len(rows)+1)
		ids := make([]int64, len(rows))
		b.WriteString("UPDATE events SET sequence = CASE id")
		next := last + 1
		for i, r := range rows {
			b.WriteString(" WHEN ? THEN ?")
			args = append(args, r.ID, next)
			next += r.N
			ids[i] = r.ID
		}
		b.WriteString(" END WHERE id IN ? AND sequence IS NULL")
		res := tx.Exec(b.String(), append(args, ids)...)
		if res.Error != nil {
			return fmt.Errorf("sequence %d rows of events: %w", len(rows), res.Error)
		}
		if res.RowsAffected != int64(len(rows)) {
			return fmt.Errorf("sequence events: %d of %d rows changed", res.RowsAffected, len(rows))
		}
		n = int(next - last - 1)
		return tx.Exec("UPDATE event_sequence SET last = ? WHERE id = 1", next-1).Error
	}, readCommitted)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Events returns the kept events after sequence after, in sequence
// order, at most limit: whatever after is (before the first kept, inside
// a row, at a row's end, past the last) and whatever the limit, the
// events API, the relay, a redelivery and the backlog gauges read
// through it (rowsAfter finds the rows). A sequenced row never
// changes, so the rows read last are kept
// decoded (rowCache): the relay reads a worker's row of hundreds of
// events a batch at a time.
func (s *Store) Events(ctx context.Context, after int64, limit int) ([]OutboxEvent, error) {
	if limit < 1 {
		return nil, nil
	}
	db := s.db.WithContext(ctx)
	heads, err := rowsAfter(db, after, limit)
	if err != nil {
		return nil, err
	}
	snaps := make(map[int64][]Snapshot, len(heads))
	var missing []int64
	for _, h := range heads {
		if ss, ok := s.rows.get(h.ID); ok {
			snaps[h.ID] = ss
		} else {
			missing = append(missing, h.ID)
		}
	}
	if len(missing) > 0 {
		var bodies []struct {
			ID     int64
			Events []byte
		}
		if err := db.Raw("SELECT id, events FROM events WHERE id IN ?", missing).Scan(&bodies).Error; err != nil {
			return nil, fmt.Errorf("read events after %d: %w", after, err)
		}
		for _, b := range bodies {
			ss, err := decodeSnapshots(b.Events)
			if err != nil {
				return nil, fmt.Errorf("events row %d: %w", b.ID, err)
			}
			snaps[b.ID] = ss
			s.rows.put(b.ID, ss)
		}
	}
	out := make([]OutboxEvent, 0, min(limit, 1024))
	for _, h := range heads {
		ss, ok := snaps[h.ID]
		if !ok { // deleted between the two reads: what follows it is read next time
			break
		}
		if len(ss) != h.N {
			return nil, fmt.Errorf("events row %d: %d events, n says %d", h.ID, len(ss), h.N)
		}
		for k, snap := range ss {
			if seq := *h.Sequence + int64(k); seq > after && len(out) < limit {
				out = append(out, OutboxEvent{Snapshot: snap, Row: h.ID, K: k, Sequence: seq, OccurredAt: h.OccurredAt})
			}
		}
	}
	return out, nil
}

// rowsAfter is the heads of the rows holding the first limit kept
// events after sequence after, in sequence order. The kept sequences are
// a run without holes (given 1, 2, 3, ... in one transaction at a time;
// deleted oldest first), so those events are the run from start =
// max(after+1, the first kept) and are held by the rows that begin
// before start+limit and end after start. A row ending after start
// begins at most MaxEventsPerRow-1 before it, so the index finds them
// from there. Usually after+1 is kept: one query; when it is not (after
// is before the first kept, or past the last), a second query finds the
// first kept after it.
func rowsAfter(db *gorm.DB, after int64, limit int) ([]eventRow, error) {
	heads, err := rowsFrom(db, after+1, limit)
	if err != nil || (len(heads) > 0 && *heads[0].Sequence <= after+1) {
		return heads, err
	}
	var first []int64
	if err := db.Raw(`SELECT sequence FROM events WHERE sequence IS NOT NULL AND sequence > ? AND sequence + n > ?
		ORDER BY sequence LIMIT 1`, max(after+1-MaxEventsPerRow, 0), after+1).Scan(&first).Error; err != nil {
		return nil, fmt.Errorf("read events after %d: %w", after, err)
	}
	if len(first) == 0 {
		return nil, nil
	}
	return rowsFrom(db, max(first[0], after+1), limit)
}

// rowsFrom is the heads of the rows holding kept events start to
// start+limit-1.
func rowsFrom(db *gorm.DB, start int64, limit int) ([]eventRow, error) {
	var heads []eventRow
	if err := db.Raw(`SELECT id, sequence, n, occurred_at FROM events
		WHERE sequence IS NOT NULL AND sequence > ? AND sequence < ? AND sequence + n > ? ORDER BY sequence LIMIT ?`,
		max(start-MaxEventsPerRow, 0), start+int64(limit), start, limit).Scan(&heads).Error; err != nil {
		return nil, fmt.Errorf("read events from %d: %w", start, err)
	}
	return heads, nil
}

// OldestAfter is when the first kept event after sequence after was
// written (nil: none kept): a sink's oldest undelivered event, read as
// Events reads it, without the row's body.
func (s *Store) OldestAfter(ctx context.Context, after int64) (*time.Time, error) {
	heads, err := rowsAfter(s.db.WithContext(ctx), after, 1)
	if err != nil || len(heads) == 0 {
		return nil, err
	}
	return &heads[0].OccurredAt, nil
}

// rowCache keeps the last rows of events decoded, by row id.
type rowCache struct {
	mu    sync.Mutex
	rows  map[int64][]Snapshot
	order []int64
}

// rowCacheSize: rows kept decoded (a row holds up to MaxEventsPerRow events).
const rowCacheSize = 16

func (c *rowCache) get(id int64) ([]Snapshot, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ss, ok := c.rows[id]
	return ss, ok
}

func (c *rowCache) put(id int64, ss []Snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rows == nil {
		c.rows = map[int64][]Snapshot{}
	}
	if _, ok := c.rows[id]; ok {
		return
	}
	c.rows[id] = ss
	c.order = append(c.order, id)
	if len(c.order) > rowCacheSize {
		delete(c.rows, c.order[0])
		c.order = c.order[1:]
	}
}

// OutboxEvents returns every event the outbox holds, sequenced or not,
// in the order written: for checks and tests.
func (s *Store) OutboxEvents(ctx context.Context) ([]OutboxEvent, error) {
	var rows []eventRow
	if err := s.db.WithContext(ctx).Raw("SELECT id, sequence, n, events, occurred_at FROM events ORDER BY id").Scan(&rows).Error; err != nil {
		return nil, err
	}
	var out []OutboxEvent
	for _, r := range rows {
		es, err := r.expand()
		if err != nil {
			return nil, err
		}
		out = append(out, es...)
	}
	return out, nil
}

// EventBacklog is how many events wait for their sequence, and when the
// oldest of them was written (zero: none).
func (s *Store) EventBacklog(ctx context.Context) (int64, time.Time, error) {
	var row struct {
		N      int64
		Oldest *time.Time
	}
	err := s.db.WithContext(ctx).Raw("SELECT COALESCE(SUM(n), 0) AS n, MIN(occurred_at) AS oldest FROM events WHERE sequence IS NULL").Scan(&row).Error
	if err != nil || row.Oldest == nil {
		return row.N, time.Time{}, err
	}
	return row.N, *row.Oldest, nil
}

// DeleteEventsBefore deletes sequenced events written before cutoff, a
// row at a time, oldest sequence first and never past a younger one
// (what is kept is a run of sequences with no hole), nor past an event a
// sink relayed since cutoff has yet to deliver, at most limit rows; it
// returns how many events it deleted.
func (s *Store) DeleteEventsBefore(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	var page []struct {
		Sequence, N int64
		OccurredAt  time.Time
	}
	db := s.db.WithContext(ctx)
	keep, err := sinksKeep(db, cutoff)
	if err != nil {
		return 0, fmt.Errorf("find what the sinks need: %w", err)
	}
	if err := db.Raw("SELECT sequence, n, occurred_at FROM events WHERE sequence IS NOT NULL ORDER BY sequence LIMIT ?", limit).
		Scan(&page).Error; err != nil {
		return 0, fmt.Errorf("find old events: %w", err)
	}
	upto, events := int64(-1), int64(0)
	for _, e := range page {
		if !e.OccurredAt.Before(cutoff) || (keep > 0 && e.Sequence+e.N > keep) {
			break
		}
		upto, events = e.Sequence, events+e.N
	}
	if upto < 0 {
		return 0, nil
	}
	if err := db.Exec("DELETE FROM events WHERE sequence IS NOT NULL AND sequence <= ?", upto).Error; err != nil {
		return 0, fmt.Errorf("delete old events: %w", err)
	}
	return int(events), nil
}

// EventsState is where the outbox stands: the last sequence given, the
// sequences kept (first to last, none when First is 0), and the events
// not sequenced yet with when the oldest was written.
type EventsState struct {
	Last, First, Kept int64
	Unsequenced       int64
	OldestUnsequenced time.Time
}

// EventsState reads where the outbox stands.
func (s *Store) EventsState(ctx context.Context) (EventsState, error) {
	var st EventsState
	db := s.db.WithContext(ctx)
	if err := db.Raw("SELECT last FROM event_sequence WHERE id = 1").Scan(&st.Last).Error; err != nil {
		return st, fmt.Errorf("read the event sequence: %w", err)
	}
	if err := db.Raw("SELECT COALESCE(MIN(sequence), 0) AS first, COALESCE(SUM(n), 0) AS kept FROM events WHERE sequence IS NOT NULL").
		Row().Scan(&st.First, &st.Kept); err != nil {
		return st, fmt.Errorf("read the events kept: %w", err)
	}
	var err error
	st.Unsequenced, st.OldestUnsequenced, err = s.EventBacklog(ctx)
	return st, err
}
