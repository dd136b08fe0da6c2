package db_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/order"
)

// eventsOf returns every event of the outbox, in the order written, as
// "order status reason".
func eventsOf(t *testing.T, e *testenv.Env) []string {
	t.Helper()
	events, err := e.DB.OutboxEvents(context.Background())
	require.NoError(t, err)
	out := make([]string, len(events))
	for i, r := range events {
		out[i] = fmt.Sprintf("%d %s %s", r.OrderID-1_000_000, r.Status, r.Reason)
	}
	return out
}

// Every status an order reaches in MySQL is one event, written with the
// change; what changes nothing (a redelivery, paying twice, a cancel of a
// cancelled order) writes none.
func TestEveryStatusChangeWritesOneEvent(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	v := e.SeedVoucher(t, db.Voucher{Stock: 4}, -1)
	os := orders(v.ID, 0, 5)
	_, err := e.DB.PersistBatch(ctx, os) // 4 created, the fifth failed
	require.NoError(t, err)
	_, err = e.DB.PersistBatch(ctx, os) // redelivered: nothing written
	require.NoError(t, err)
	now := time.Now().UTC().Truncate(time.Millisecond)
	_, err = e.DB.PayOrder(ctx, os[0].ID, os[0].UserID, now)
	require.NoError(t, err)
	_, err = e.DB.PayOrder(ctx, os[0].ID, os[0].UserID, now)
	require.NoError(t, err)
	_, _, err = e.DB.CancelOrder(ctx, os[1].ID, os[1].UserID, now)
	require.NoError(t, err)
	_, _, err = e.DB.CancelOrder(ctx, os[1].ID, os[1].UserID, now)
	require.NoError(t, err)
	_, err = e.DB.RecordPayment(ctx, os[2].ID, "pay-2", now)
	require.NoError(t, err)
	_, err = e.DB.RecordPayment(ctx, os[2].ID, "pay-2", now)
	require.NoError(t, err)
	cancelled, err := e.DB.CancelExpired(ctx, now.Add(time.Hour), 100)
	require.NoError(t, err)
	require.Len(t, cancelled, 1)
	late := orders(v.ID, 9, 1)[0]
	_, _, err = e.DB.RecordFailed(ctx, late, db.ReasonDeadLetter)
	require.NoError(t, err)
	_, _, err = e.DB.RecordFailed(ctx, late, db.ReasonDeadLetter)
	require.NoError(t, err)

	require.Equal(t, []string{
		"0 created ", "1 created ", "2 created ", "3 created ", "4 failed out_of_stock",
		"0 paid ", "1 cancelled cancelled_by_user", "2 paid ", "3 cancelled payment_expired", "9 failed dead_letter",
	}, eventsOf(t, e))

	// Every cancelled or failed order says why in MySQL, the word its
	// last event says.
	outbox, err := e.DB.OutboxEvents(ctx)
	require.NoError(t, err)
	why := map[int64]string{}
	for _, ev := range outbox {
		why[ev.OrderID] = ev.Reason
	}
	var rows []struct {
		ID     int64
		Status string
		Reason string
	}
	require.NoError(t, e.DB.DB().Raw("SELECT id, status, reason FROM orders WHERE status IN ('cancelled', 'failed')").Scan(&rows).Error)
	require.Len(t, rows, 4)
	for _, r := range rows {
		require.NotEmpty(t, r.Reason, "order %d %s", r.ID, r.Status)
		require.Equal(t, why[r.ID], r.Reason, "order %d: the row's reason is the event's", r.ID)
	}

	// Sequenced in the order written, 1 to 10 (the batch's five events
	// are one row), then nothing more to do; read in pages.
	n, err := e.DB.SequenceEvents(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, 6, n, "the batch's row and the payment's")
	n, err = e.DB.SequenceEvents(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	n, err = e.DB.SequenceEvents(ctx, 100)
	require.NoError(t, err)
	require.Zero(t, n)
	page, err := e.DB.Events(ctx, 3, 2)
	require.NoError(t, err)
	require.Len(t, page, 2, "from the middle of a row")
	require.EqualValues(t, 4, page[0].Sequence)
	require.EqualValues(t, 5, page[1].Sequence)
	require.Equal(t, "failed", page[1].Status)
	page, err = e.DB.Events(ctx, 4, 3)
	require.NoError(t, err)
	require.Len(t, page, 3, "across rows")
	require.Equal(t, []int64{5, 6, 7}, []int64{page[0].Sequence, page[1].Sequence, page[2].Sequence})
	require.NotEqual(t, page[0].ID(), page[1].ID())

	// Retention deletes the oldest rows first, at most the limit.
	deleted, err := e.DB.DeleteEventsBefore(ctx, time.Now().Add(time.Hour), 2)
	require.NoError(t, err)
	require.Equal(t, 6, deleted, "the batch's five and the payment")
	kept, err := e.DB.Events(ctx, 0, 100)
	require.NoError(t, err)
	require.Len(t, kept, 4)
	require.EqualValues(t, 7, kept[0].Sequence, "what is kept starts where the deleted end")
	deleted, err = e.DB.DeleteEventsBefore(ctx, time.Now().Add(-time.Hour), 100)
	require.NoError(t, err)
	require.Zero(t, deleted, "nothing younger than the cutoff")
}

// An event exists if and only if its change committed: a cancellation
// whose transaction fails after writing its event leaves neither.
func TestARolledBackChangeLeavesNoEvent(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	v := e.SeedVoucher(t, db.Voucher{Stock: 1}, -1)
	o := orders(v.ID, 0, 1)[0]
	_, err := e.DB.PersistBatch(ctx, []order.Order{o})
	require.NoError(t, err)
	// Another transaction holds the voucher's row: the cancellation writes
	// the order's new status and its event, then waits for the voucher,
	// and its deadline rolls everything back.
	tx := e.DB.DB().Begin()
	require.NoError(t, tx.Exec("SELECT id FROM vouchers WHERE id = ? FOR UPDATE", v.ID).Error)
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, _, err = e.DB.CancelOrder(short, o.ID, o.UserID, time.Now())
	cancel()
	require.NoError(t, tx.Rollback().Error)
	require.Error(t, err)
	require.True(t, errors.Is(err, context.DeadlineExceeded) || db.Classify(err) == db.ClassOutage, "%v", err)
	require.Equal(t, []string{"0 created "}, eventsOf(t, e), "no event of the cancellation that rolled back")
	require.EqualValues(t, 1, e.Count(t, "SELECT COUNT(*) FROM orders WHERE status = 'created'"))
}

// Workers persisting, buyers paying and two reapers sequencing, all at
// once: the sequences are 1..N with no gap and none twice, and each
// order's created comes before its paid.
func TestSequencesHaveNoGapsUnderConcurrentWriters(t *testing.T) {
	e := testenv.New(t, 1)
	ctx := context.Background()
	const writers, batches, per = 3, 8, 10
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := range writers {
		v := e.SeedVoucher(t, db.Voucher{Stock: batches * per}, -1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				os := orders(v.ID, w*10_000+b*per, per)
				_, err := e.DB.PersistBatch(ctx, os)
				if !assert.NoError(t, err) { // assert: this is not the test's goroutine
					return
				}
				for _, o := range os[:per/2] {
					_, err := e.DB.PayOrder(ctx, o.ID, o.UserID, time.Now())
					assert.NoError(t, err)
				}
			}
		}()
	}
	var seqWG sync.WaitGroup
	for range 2 {
		seqWG.Add(1)
		go func() {
			defer seqWG.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				_, err := e.DB.SequenceEvents(ctx, 7)
				assert.NoError(t, err)
			}
		}()
	}
	wg.Wait()
	close(done)
	seqWG.Wait()
	for {
		n, err := e.DB.SequenceEvents(ctx, 100)
		require.NoError(t, err)
		if n == 0 {
			break
		}
	}
	all, err := e.DB.Events(ctx, 0, 10_000)
	require.NoError(t, err)
	want := writers * batches * (per + per/2)
	require.Len(t, all, want)
	created := map[int64]int64{}
	for i, ev := range all {
		require.EqualValues(t, i+1, ev.Sequence, "no gap, none twice")
		switch ev.Status {
		case "created":
			created[ev.OrderID] = ev.Sequence
		case "paid":
			c, ok := created[ev.OrderID]
			require.True(t, ok && c < ev.Sequence, "order %d: paid before created", ev.OrderID)
		}
	}
	require.EqualValues(t, want, e.Count(t, "SELECT last FROM event_sequence"))
	require.Zero(t, e.Count(t, "SELECT COUNT(*) FROM events WHERE sequence IS NULL"))
	ids := map[string]bool{}
	for _, ev := range all {
		require.False(t, ids[ev.ID()], "event ids are unique")
		ids[ev.ID()] = true
	}
}
