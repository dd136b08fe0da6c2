package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/event"
	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testsink"
	"github.com/flashsale/flashsale/pkg/reaper"
	"github.com/flashsale/flashsale/pkg/worker"
)

// seq is a sequence as the events carry it: 20 digits, zero-padded.
func seq(n int64) string { return fmt.Sprintf("%020d", n) }

// The events API: each order's changes in their sequence, as CloudEvents
// carrying the order as GET /v1/orders/{id} shows it, a page at a time;
// bad paging is 400 invalid_field; only for the admin.
func TestTheEventsAPI(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"phone","stock":5}`)
	claim := func(user string) string {
		res := f.do("POST", "/v1/vouchers/"+id+"/orders", f.token(user), "")
		require.Equal(t, http.StatusAccepted, res.Status, res.Raw)
		return res.Body["order_id"].(string)
	}
	ann, ben := claim("ann"), claim("ben")
	f.persist(id)
	require.Equal(t, http.StatusOK, f.do("POST", "/v1/orders/"+ann+"/pay", f.token("ann"), "").Status)
	require.Equal(t, http.StatusOK, f.do("POST", "/v1/orders/"+ben+"/cancel", f.token("ben"), "").Status)
	list := func(query string) response {
		t.Helper()
		res := f.do("GET", "/admin/v1/events"+query, admin, "")
		require.Equal(t, http.StatusOK, res.Status, res.Raw)
		return res
	}
	require.Empty(t, list("").Body["events"], "not sequenced yet: not published")
	require.Equal(t, seq(0), list("").Body["next"])
	n, err := f.env.DB.SequenceEvents(context.Background(), 100)
	require.NoError(t, err)
	require.Equal(t, 4, n)

	all := list("?after=0").Body["events"].([]any)
	require.Len(t, all, 4)
	types := []string{}
	for i, raw := range all {
		ev := raw.(map[string]any)
		require.Equal(t, "1.0", ev["specversion"])
		require.Equal(t, "flashsale", ev["source"])
		require.Equal(t, "application/json", ev["datacontenttype"])
		require.Equal(t, seq(int64(i+1)), ev["sequence"])
		require.NotEmpty(t, ev["id"])
		_, err := time.Parse(time.RFC3339Nano, ev["time"].(string))
		require.NoError(t, err)
		data := ev["data"].(map[string]any)
		require.Equal(t, ev["subject"], data["order_id"])
		require.Equal(t, id, data["voucher_id"])
		types = append(types, ev["type"].(string)+" "+data["user_id"].(string))
	}
	require.Equal(t, []string{"order.created ann", "order.created ben", "order.paid ann", "order.cancelled ben"}, types)
	last := all[3].(map[string]any)["data"].(map[string]any)
	require.Equal(t, "cancelled", last["status"])
	require.Equal(t, "cancelled_by_user", last["reason"])
	// The paid event carries the order as the API shows it now.
	order := f.do("GET", "/v1/orders/"+ann, f.token("ann"), "")
	paid := all[2].(map[string]any)["data"].(map[string]any)
	for _, k := range []string{"order_id", "voucher_id", "user_id", "quantity", "status", "created_at", "expires_at", "paid_at"} {
		require.Equal(t, order.Body[k], paid[k], k)
	}

	page := list("?after=1&limit=2")
	require.Len(t, page.Body["events"], 2)
	require.Equal(t, seq(3), page.Body["next"])
	require.Equal(t, all[1], page.Body["events"].([]any)[0], "the same event, the same body")
	end := list("?after=4")
	require.Empty(t, end.Body["events"])
	require.Equal(t, seq(4), end.Body["next"], "nothing yet: ask again from the same place")
	require.Nil(t, end.Body["first_kept"], "nothing missed")

	for _, bad := range []string{"?after=x", "?after=-1", "?limit=0", "?limit=5000", "?limit=1.5"} {
		requireError(t, f.do("GET", "/admin/v1/events"+bad, admin, ""), http.StatusBadRequest, "invalid_field")
	}
	requireError(t, f.do("GET", "/admin/v1/events", f.token("ann"), ""), http.StatusUnauthorized, "unauthorized")
}

// GET /admin/v1/events/sinks: where each sink stands, as the relay left
// it; none before a reaper relays; only for the admin.
func TestTheSinksAPI(t *testing.T) {
	f := newFixture(t)
	res := f.do("GET", "/admin/v1/events/sinks", admin, "")
	require.Equal(t, http.StatusOK, res.Status, res.Raw)
	require.Equal(t, []any{}, res.Body["sinks"])
	id := f.createVoucher(`{"name":"phone","stock":5}`)
	for _, u := range []string{"ann", "ben", "cat"} {
		require.Equal(t, http.StatusAccepted, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token(u), "").Status)
	}
	f.persist(id)
	ctx := context.Background()
	_, held, err := f.env.DB.HoldSink(ctx, "kafka", "reaper-a", time.Minute) // starts at the last sequence: 0
	require.NoError(t, err)
	require.True(t, held)
	n, err := f.env.DB.SequenceEvents(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	moved, err := f.env.DB.AdvanceSink(ctx, "kafka", "reaper-a", 0, 1)
	require.NoError(t, err)
	require.True(t, moved)

	res = f.do("GET", "/admin/v1/events/sinks", admin, "")
	require.Equal(t, http.StatusOK, res.Status, res.Raw)
	require.Equal(t, 3.0, res.Body["published_up_to"])
	sinks := res.Body["sinks"].([]any)
	require.Len(t, sinks, 1)
	s := sinks[0].(map[string]any)
	require.Equal(t, "kafka", s["name"])
	require.Equal(t, 1.0, s["delivered_up_to"])
	require.Equal(t, 2.0, s["undelivered"])
	require.NotEmpty(t, s["oldest_undelivered"])
	require.Equal(t, "reaper-a", s["relayed_by"])
	requireError(t, f.do("GET", "/admin/v1/events/sinks", f.token("ann"), ""), http.StatusUnauthorized, "unauthorized")
}

// The edges a consumer meets: paging a page an event at a time from 0
// reaches every event; after the retention deleted the first rows, after
// 0 and 1 answer the first kept event and say where the kept ones begin;
// an after past the last published is refused, not answered as caught
// up; sequences sort as text in their order.
func TestTheEventsAPIAtItsEdges(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	id := f.createVoucher(`{"name":"phone","stock":20}`)
	var ids []string
	for i := range 12 { // a batch's row, then a row a payment
		res := f.do("POST", "/v1/vouchers/"+id+"/orders", f.token(fmt.Sprintf("u%d", i)), "")
		require.Equal(t, http.StatusAccepted, res.Status, res.Raw)
		ids = append(ids, res.Body["order_id"].(string))
	}
	f.persist(id)
	for i, o := range ids[:4] {
		require.Equal(t, http.StatusOK, f.do("POST", "/v1/orders/"+o+"/pay", f.token(fmt.Sprintf("u%d", i)), "").Status)
	}
	_, err := f.env.DB.SequenceEvents(ctx, 100)
	require.NoError(t, err)
	list := func(query string) response {
		t.Helper()
		res := f.do("GET", "/admin/v1/events"+query, admin, "")
		require.Equal(t, http.StatusOK, res.Status, res.Raw)
		return res
	}
	page := func(after string, limit int) ([]string, string) {
		t.Helper()
		res := list(fmt.Sprintf("?after=%s&limit=%d", after, limit))
		var got []string
		for _, e := range res.Body["events"].([]any) {
			got = append(got, e.(map[string]any)["sequence"].(string))
		}
		return got, res.Body["next"].(string)
	}
	var paged []string
	for after := "0"; ; {
		got, next := page(after, 1)
		if len(got) == 0 {
			require.Equal(t, after, next)
			break
		}
		require.Equal(t, []string{next}, got)
		paged, after = append(paged, got...), next
	}
	require.Len(t, paged, 16, "12 created, 4 paid: every event, one page each")
	require.True(t, sort.StringsAreSorted(paged), "sequences sort as text: %v", paged)
	for i, s := range paged {
		require.Equal(t, seq(int64(i+1)), s)
	}
	requireError(t, f.do("GET", "/admin/v1/events?after=17", admin, ""), http.StatusBadRequest, "after_past_last")
	requireError(t, f.do("GET", "/admin/v1/events?after=99999999", admin, ""), http.StatusBadRequest, "after_past_last")

	// The retention deletes the batch's row (1-12) and the first payment (13).
	deleted, err := f.env.DB.DeleteEventsBefore(ctx, time.Now().Add(time.Hour), 2)
	require.NoError(t, err)
	require.Equal(t, 13, deleted)
	for _, after := range []string{"0", "1", "12"} {
		res := list("?after=" + after + "&limit=1")
		require.Len(t, res.Body["events"], 1, "after %s", after)
		require.Equal(t, seq(14), res.Body["events"].([]any)[0].(map[string]any)["sequence"])
		require.Equal(t, seq(14), res.Body["first_kept"], "after %s: the events before 14 are gone", after)
	}
	res := list("?after=13&limit=1")
	require.Equal(t, seq(14), res.Body["next"])
	require.Nil(t, res.Body["first_kept"], "after 13 misses nothing")
	got, _ := page(seq(14), 1000)
	require.Equal(t, []string{seq(15), seq(16)}, got, "a padded after reads as its number")

	// The retention deletes every event: a consumer behind is told what
	// it missed, never answered as caught up.
	deleted, err = f.env.DB.DeleteEventsBefore(ctx, time.Now().Add(time.Hour), 100)
	require.NoError(t, err)
	require.Equal(t, 3, deleted)
	for _, after := range []string{"0", "1", "15"} {
		res := list("?after=" + after)
		require.Empty(t, res.Body["events"], "after %s", after)
		require.Equal(t, seq(17), res.Body["first_kept"], "after %s: the events to 16 are gone", after)
		require.Equal(t, seq(16), res.Body["next"], "after %s", after)
	}
	res = list("?after=16")
	require.Nil(t, res.Body["first_kept"], "after 16 misses nothing")
	require.Equal(t, seq(16), res.Body["next"])
}

// FLASHSALE_EVENTS_READ_TOKEN reads the events and the sinks, and every
// other admin route refuses it 403; the admin token still reads them.
func TestTheEventsReadTokenReadsEventsOnly(t *testing.T) {
	const reader = "events-reader-token-0123456789abcdef"
	f := newFixtureOn(t, testenv.New(t, 4), gateway.Config{EventsReadToken: reader})
	for _, path := range []string{"/admin/v1/events", "/admin/v1/events?after=0&limit=1", "/admin/v1/events/sinks"} {
		require.Equal(t, http.StatusOK, f.do("GET", path, reader, "").Status, path)
		require.Equal(t, http.StatusOK, f.do("GET", path, admin, "").Status, path)
	}
	for _, r := range [][2]string{{"GET", "/admin/v1/vouchers"}, {"POST", "/admin/v1/vouchers"}, {"GET", "/admin/v1/vouchers/1"},
		{"GET", "/admin/v1/vouchers/1/report"}, {"PATCH", "/admin/v1/vouchers/1"}, {"POST", "/admin/v1/vouchers/1/access-codes"},
		{"POST", "/admin/v1/vouchers/1/pause"}, {"POST", "/admin/v1/vouchers/1/resume"}, {"GET", "/admin/v1/stats"}, {"GET", "/admin/v1/history"}} {
		requireError(t, f.do(r[0], r[1], reader, `{"name":"x","stock":1}`), http.StatusForbidden, "forbidden")
	}
	requireError(t, f.do("GET", "/admin/v1/events", "not-the-reader-token-0123456789abcdef", ""), http.StatusUnauthorized, "unauthorized")
}

// The events API filters by voucher and by type, and next moves over the
// whole sequence all the same (a consumer of one voucher does not stall
// on a page of others'); a parameter it does not take is refused, where it
// had been ignored (voucher= answered every event).
func TestTheEventsAPIFilters(t *testing.T) {
	f := newFixture(t)
	a := f.createVoucher(`{"name":"a","stock":5}`)
	b := f.createVoucher(`{"name":"b","stock":5}`)
	for i, v := range []string{a, b, a, b, b} {
		res := f.do("POST", "/v1/vouchers/"+v+"/orders", f.token(fmt.Sprintf("u%d", i)), "")
		require.Equal(t, http.StatusAccepted, res.Status, res.Raw)
	}
	f.persist(a)
	f.persist(b)
	mine := f.do("GET", "/v1/orders?voucher_id="+a, f.token("u0"), "").Body["orders"].([]any)[0].(map[string]any)["order_id"].(string)
	require.Equal(t, http.StatusOK, f.do("POST", "/v1/orders/"+mine+"/pay", f.token("u0"), "").Status)
	// b's buckets split, recorded as the reaper's splitter records it.
	splitAt := time.Now().UTC().Truncate(time.Millisecond)
	_, _, err := f.env.DB.AskSplit(t.Context(), parseID(t, b), 4, db.ActorAdmin, func(db.Voucher) error { return nil })
	require.NoError(t, err)
	require.NoError(t, f.env.DB.SplitDone(t.Context(), parseID(t, b), 4, splitAt))
	_, err = f.env.DB.SequenceEvents(context.Background(), 100)
	require.NoError(t, err)
	list := func(query string) response {
		t.Helper()
		res := f.do("GET", "/admin/v1/events"+query, admin, "")
		require.Equal(t, http.StatusOK, res.Status, res.Raw)
		return res
	}
	all := list("?after=0")
	require.Len(t, all.Body["events"], 7)
	of := func(res response) (vouchers, types []string) {
		for _, raw := range res.Body["events"].([]any) {
			ev := raw.(map[string]any)
			vouchers = append(vouchers, ev["data"].(map[string]any)["voucher_id"].(string))
			types = append(types, ev["type"].(string))
		}
		return vouchers, types
	}
	vs, _ := of(list("?after=0&voucher_id=" + a))
	require.Equal(t, []string{a, a, a}, vs)
	_, ts := of(list("?after=0&type=order.paid"))
	require.Equal(t, []string{"order.paid"}, ts)
	vs, ts = of(list("?after=0&voucher_id=" + b + "&type=order.created"))
	require.Equal(t, []string{b, b, b}, vs)
	require.Equal(t, []string{"order.created", "order.created", "order.created"}, ts)
	splits := list("?after=0&type=voucher.split").Body["events"].([]any)
	require.Len(t, splits, 1)
	ev := splits[0].(map[string]any)
	require.Equal(t, b, ev["subject"], "a split's subject is its voucher")
	require.Equal(t, map[string]any{"voucher_id": b, "stock_buckets": float64(4), "split_at": splitAt.Format(time.RFC3339Nano)}, ev["data"])
	vs, _ = of(list("?after=0&voucher_id=" + b))
	require.Equal(t, []string{b, b, b, b}, vs, "a split is its voucher's event")

	// A page of one event of the whole sequence: next moves on whatever
	// the filter keeps.
	var next []string
	for after := "0"; ; {
		res := list("?limit=1&voucher_id=" + a + "&after=" + after)
		if res.Body["next"] == after || res.Body["next"] == seq(mustInt(t, after)) {
			break
		}
		after = res.Body["next"].(string)
		next = append(next, after)
	}
	require.Equal(t, []string{seq(1), seq(2), seq(3), seq(4), seq(5), seq(6), seq(7)}, next, "every sequence, one a page")
	none := list("?after=0&voucher_id=999")
	require.Empty(t, none.Body["events"])
	require.Equal(t, all.Body["next"], none.Body["next"], "a page of no kept event still moves on")

	requireError(t, f.do("GET", "/admin/v1/events?voucher=1", admin, ""), http.StatusBadRequest, "unknown_field")
	requireError(t, f.do("GET", "/admin/v1/events?type=order.shipped", admin, ""), http.StatusBadRequest, "invalid_field")
	requireError(t, f.do("GET", "/admin/v1/events?voucher_id=x", admin, ""), http.StatusBadRequest, "invalid_field")
	requireError(t, f.do("GET", "/admin/v1/events?after=1&after=2", admin, ""), http.StatusBadRequest, "invalid_field")
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err)
	return n
}

// The events read token shared the operator's 8 MySQL slots: a consumer
// polling the events hard (64 connections) had 35 of 60 pauses answered
// 503. Event readers now have slots and a pool of their own; and an
// admin request's token is checked before it takes a slot, so requests
// without one are told 401, never 503, however full the slots.
func TestTheEventsReadersNeverStarveTheOperator(t *testing.T) {
	const reader = "events-reader-token-0123456789abcdef"
	f := newFixtureOn(t, testenv.New(t, 4), gateway.Config{EventsReadToken: reader, MySQLTimeout: time.Minute})
	id := f.createVoucher(`{"name":"x","stock":5}`)
	ctx := context.Background()
	sqlDB, err := f.env.DB.DB().DB()
	require.NoError(t, err)
	lock, err := sqlDB.Conn(ctx)
	require.NoError(t, err)
	unlocked := false
	unlock := func() {
		if !unlocked {
			unlocked = true
			_, err := lock.ExecContext(ctx, "UNLOCK TABLES")
			require.NoError(t, err)
		}
	}
	t.Cleanup(func() { unlock(); lock.Close() })
	waiting := func() int {
		var n int
		require.NoError(t, sqlDB.QueryRowContext(ctx,
			`SELECT COUNT(*) FROM information_schema.processlist WHERE state LIKE 'Waiting for table%'`).Scan(&n))
		return n
	}
	// Every read of the events waits on MySQL (the table locked): as many
	// pollers as hold a slot wait, the others are answered 503 at once.
	_, err = lock.ExecContext(ctx, "LOCK TABLES events WRITE")
	require.NoError(t, err)
	var answered atomic.Int64
	var wg sync.WaitGroup
	const pollers = 20
	for range pollers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.do("GET", "/admin/v1/events", reader, "")
			answered.Add(1)
		}()
	}
	testenv.Eventually(t, 30*time.Second, "each poller waiting or answered", func() bool {
		return int(answered.Load())+waiting() >= pollers
	})
	for _, op := range []string{"pause", "resume"} {
		res := f.do("POST", "/admin/v1/vouchers/"+id+"/"+op, admin, "")
		require.Equal(t, http.StatusOK, res.Status, "%s beside %d pollers of the events: %s", op, pollers, res.Raw)
	}

	// The operator's own slots full (the vouchers' table locked too):
	// a request with a bad token is told so.
	_, err = lock.ExecContext(ctx, "LOCK TABLES events WRITE, vouchers WRITE")
	require.NoError(t, err)
	before := waiting()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
		}()
	}
	testenv.Eventually(t, 30*time.Second, "the operator's 8 slots held", func() bool { return waiting()-before >= 8 })
	requireError(t, f.do("GET", "/admin/v1/vouchers/"+id, "not-the-admin-token-0123456789abcdef", ""), http.StatusUnauthorized, "unauthorized")
	requireError(t, f.do("GET", "/admin/v1/vouchers/"+id, admin, ""), http.StatusServiceUnavailable, "unavailable")
	unlock()
	wg.Wait()
}

// A webhook endpoint (or a Kafka consumer group, whose partitions each
// see a part of the sequence) proves it missed nothing as EVENTS.md,
// "Proving nothing was missed", says: every sequence up to the sink's
// delivered_up_to (GET /admin/v1/events/sinks) is one it holds; each one
// it does not hold is read from the events API with after=sequence-1.
// The endpoint here got every event from a relay's 16 lanes, then lost
// one (its store deleted a record): the recipe finds exactly that one,
// and the API gives it back, the same bytes.
func TestAPushConsumerFindsTheEventItLost(t *testing.T) {
	f := newFixture(t)
	endpoint := testsink.NewReceiver(t)
	r, err := reaper.New(reaper.Config{Config: worker.Config{Consumer: "relay", TakeoverMinIdle: time.Second, Block: time.Millisecond},
		ConsumerGoneAfter: time.Hour, Interval: time.Hour, EventsInterval: 20 * time.Millisecond,
		EventsConfig: event.Config{WebhookURLs: []string{endpoint.URL}, WebhookSecret: testsink.Secret}}, f.env.RDB, f.env.DB, zaptest.NewLogger(t))
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.Run(ctx) })
	defer wg.Wait()
	defer stop()

	id := f.createVoucher(`{"name":"phone","stock":100}`)
	for i := range 60 {
		require.Equal(t, http.StatusAccepted, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("u"+strconv.Itoa(i)), "").Status)
	}
	f.persist(id)
	var upTo uint64
	testenv.Eventually(t, 30*time.Second, "the endpoint has every event", func() bool {
		res := f.do("GET", "/admin/v1/events/sinks", admin, "")
		sinks, _ := res.Body["sinks"].([]any)
		if len(sinks) != 1 {
			return false
		}
		s := sinks[0].(map[string]any)
		upTo = uint64(s["delivered_up_to"].(float64))
		return upTo >= 60 && upTo == uint64(res.Body["published_up_to"].(float64))
	})

	// The endpoint's store: every event it took, by sequence; one record
	// lost.
	held := map[uint64]testsink.Delivery{}
	for _, d := range endpoint.Deliveries() {
		seq, err := strconv.ParseUint(d.Sequence, 10, 64)
		require.NoError(t, err)
		held[seq] = d
	}
	require.Len(t, held, int(upTo))
	lost := held[upTo/2]
	delete(held, upTo/2)

	// The recipe.
	var missing []uint64
	for seq := uint64(1); seq <= upTo; seq++ {
		if _, ok := held[seq]; !ok {
			missing = append(missing, seq)
		}
	}
	require.Equal(t, []uint64{upTo / 2}, missing, "exactly the lost record")
	res := f.do("GET", "/admin/v1/events?limit=1&after="+strconv.FormatUint(missing[0]-1, 10), admin, "")
	require.Equal(t, http.StatusOK, res.Status, res.Raw)
	got := res.Body["events"].([]any)
	require.Len(t, got, 1)
	require.Equal(t, lost.ID, got[0].(map[string]any)["id"])
	var sent map[string]any
	require.NoError(t, json.Unmarshal(lost.Body, &sent))
	require.Equal(t, sent, got[0], "the same event the endpoint had taken")
}
