package gateway_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
)

// queueTab is a tab of the queue page at a width, with what the tests of
// this file read of it.
type queueTab struct {
	t     *testing.T
	ctx   context.Context
	width string // "1366" or "375", for the screenshots' names
}

func newQueueTab(t *testing.T, bctx context.Context, width int) *queueTab {
	tab, cancel := chromedp.NewContext(bctx)
	t.Cleanup(cancel)
	view := chromedp.EmulateViewport(1366, 768)
	if width == 375 {
		view = chromedp.EmulateViewport(375, 812, chromedp.EmulateScale(2), chromedp.EmulateMobile)
	}
	require.NoError(t, chromedp.Run(tab, view))
	return &queueTab{t: t, ctx: tab, width: map[int]string{1366: "1366", 375: "375"}[width]}
}

func (q *queueTab) text(sel string) string { return pageText(q.t, q.ctx, sel) }

func (q *queueTab) waitText(sel, want string) {
	q.t.Helper()
	waitPageText(q.t, q.ctx, 60*time.Second, sel, want)
}

func (q *queueTab) run(actions ...chromedp.Action) {
	q.t.Helper()
	require.NoError(q.t, chromedp.Run(q.ctx, actions...))
}

// liveBuy reports whether the page offers a Buy that looks pressable.
func (q *queueTab) liveBuy() bool {
	var live bool
	q.run(chromedp.Evaluate(`(() => { const b = document.getElementById("buy"); return !b.hidden && !b.disabled })()`, &live))
	return live
}

// reload reloads the page and waits for its script to have said
// something past its first words.
func (q *queueTab) reload() {
	q.t.Helper()
	q.run(chromedp.Reload())
	require.NotContains(q.t, mustLocation(q.t, q.ctx), "token=", "the token came back into the address")
}

// shot keeps a screenshot of the page as docs/queue/<name>-<width>.png
// when QUEUE_SCREENSHOTS names a directory.
func (q *queueTab) shot(name string) {
	q.t.Helper()
	if dir := os.Getenv("QUEUE_SCREENSHOTS"); dir != "" {
		var png []byte
		q.run(chromedp.FullScreenshot(&png, 100))
		require.NoError(q.t, os.WriteFile(filepath.Join(dir, name+"-"+q.width+".png"), png, 0o644))
	}
}

// fits reports whether the page fits its width, with no sideways scroll.
func (q *queueTab) fits() bool {
	var fits bool
	q.run(chromedp.Evaluate(`document.documentElement.scrollWidth <= document.documentElement.clientWidth`, &fits))
	return fits
}

// A reload returns the buyer to where the page was, at a desk's width and
// a phone's, without the token in the address: waiting in the queue,
// admitted with the turn's real time left, paused with the turn's end,
// checking a press whose outcome is unknown (Redis frozen: the reload
// goes on checking, with no Buy, and shows the order once Redis is back),
// and bought.
func TestTheQueuePageComesBackToItsStateOnAReload(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a browser")
	}
	bin := chromium(t)
	for _, width := range []int{1366, 375} {
		t.Run(map[int]string{1366: "desk", 375: "phone"}[width], func(t *testing.T) {
			f := outcomeFixture(t, true, time.Minute)
			// One unit a second, passes of a minute, one unit in all for
			// the first buyer's turn: the second waits behind it.
			id := f.createVoucher(`{"name":"Reload drop","stock":1,"waiting_room":{"admit_per_second":1,"pass_seconds":60}}`)
			f.followTime() // the room admits as time goes
			bctx := browser(t, bin)
			bctx, cancel := context.WithTimeout(bctx, 4*time.Minute)
			defer cancel()
			link := func(user string) string { return f.srv.URL + "/queue/" + id + "#token=" + f.token(user) }

			a := newQueueTab(t, bctx, width)
			a.run(chromedp.Navigate(link("alice")))
			a.waitText("#status", "It is your turn")
			a.waitText("#pass", "Your turn holds for")
			b := newQueueTab(t, bctx, width)
			b.run(chromedp.Navigate(link("bob")))
			b.waitText("#position", "1")

			// Waiting: the same place, asked by its queue token.
			b.reload()
			b.waitText("#position", "1")
			require.Equal(t, "You are in the queue.", b.text("#status"))
			require.True(t, b.fits(), "the page fits its width")
			b.shot("waiting")

			// Admitted: the turn's end is the pass's, not a new one.
			before := a.text("#pass")
			a.reload()
			a.waitText("#status", "It is your turn")
			a.waitText("#pass", "Your turn holds for")
			require.LessOrEqual(t, a.text("#pass"), before, "the countdown goes on from where it was (it said %q)", before)
			require.True(t, a.liveBuy())
			a.shot("admitted")

			// Paused: the turn's end said, no Buy, also after a reload.
			require.Equal(t, http.StatusOK, f.do("POST", "/admin/v1/vouchers/"+id+"/pause", admin, "").Status)
			a.waitText("#status", "The sale is paused")
			a.reload()
			a.waitText("#status", "it still ends at")
			require.False(t, a.liveBuy(), "Buy beside a paused sale")
			a.shot("paused")
			require.Equal(t, http.StatusOK, f.do("POST", "/admin/v1/vouchers/"+id+"/resume", admin, "").Status)
			a.waitText("#status", "It is your turn")

			// Checking: the press's outcome unknown while Redis is frozen;
			// the reload checks on, offers nothing, and ends on the order.
			require.NoError(t, f.env.Redis.Pause())
			frozen := true
			defer func() {
				if frozen {
					_ = f.env.Redis.Resume()
				}
			}()
			a.run(chromedp.Click("#buy", chromedp.ByID))
			a.waitText("#status", "Checking your order")
			a.reload()
			a.waitText("#status", "Checking your order")
			require.False(t, a.liveBuy(), "Buy offered while the press's outcome is unknown")
			require.NotEmpty(t, a.text("#busy"), "a sign of work beside the words")
			a.shot("checking")
			require.NoError(t, f.env.Redis.Resume())
			frozen = false
			a.waitText("#order", "Your order")

			// Bought: the order, after a reload too.
			orders := f.do("GET", "/v1/orders?voucher_id="+id, f.token("alice"), "")
			require.Equal(t, http.StatusOK, orders.Status, orders.Raw)
			require.Len(t, orders.Body["orders"], 1, "one press, one order")
			orderID := orders.Body["orders"].([]any)[0].(map[string]any)["order_id"].(string)
			a.reload()
			a.waitText("#order", orderID)
			require.Equal(t, "Thank you.", a.text("#status"))
			require.False(t, a.liveBuy())
			require.True(t, a.fits(), "the page fits its width")
			a.shot("bought")
		})
	}
}

// From the press of Buy until its outcome is known the page is in one
// state: Redis frozen 6 s, Buy pressed 0.5 s into it, the pass of 5 s
// lapsing meanwhile. Sampled every 50 ms, the page never offers a Buy
// that looks pressable, nor says "your turn" or "passed", until it shows
// the order, which is the one the orders API lists. After about 5 s it
// says the check may take a minute. The claim's reply is waited for 3 s
// (FLASHSALE_CLAIM_REPLY_TIMEOUT), longer than an admitted buyer's polls
// are apart (2 s at most): a poll lands while the press is out.
func TestTheQueuePageHoldsOneStateWhileAPressIsDecided(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a browser")
	}
	bin := chromium(t)
	env := testenv.New(t, 1)
	ac, err := env.Common.AdmitClient(8, time.Minute)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ac.Close() })
	f := newFixtureOn(t, env, gateway.Config{ClaimTimeout: 150 * time.Millisecond, ClaimReplyTimeout: 3 * time.Second,
		ClaimOutcomeTimeout: time.Minute}, gateway.WithAdmitClient(ac))
	t.Cleanup(func() { _ = env.Redis.Resume() })
	id := f.createVoucher(`{"name":"Held drop","stock":5,"waiting_room":{"admit_per_second":10,"pass_seconds":5}}`)
	f.followTime()                                                 // the room admits as time goes
	f.do("POST", "/v1/vouchers/"+id+"/queue", f.token("warm"), "") // the connections open
	bctx := browser(t, bin)
	bctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	defer cancel()
	a := newQueueTab(t, bctx, 1366)
	a.run(chromedp.Navigate(f.srv.URL + "/queue/" + id + "#token=" + f.token("alice")))
	a.waitText("#status", "It is your turn")

	require.NoError(t, f.env.Redis.Pause())
	frozen := true
	defer func() {
		if frozen {
			_ = f.env.Redis.Resume()
		}
	}()
	froze := time.Now()
	time.Sleep(500 * time.Millisecond) // the press comes 0.5 s into the freeze
	a.run(chromedp.Click("#buy", chromedp.ByID))
	var said []string
	long := false
	for a.text("#order") == "" {
		status := a.text("#status")
		if len(said) == 0 || said[len(said)-1] != status {
			said = append(said, status)
		}
		require.False(t, a.liveBuy(), "a pressable Buy while the press is decided (the page said %q)", said)
		require.NotContains(t, strings.ToLower(status), "your turn", "said %q", said)
		require.NotContains(t, status, "passed", "said %q", said)
		long = long || strings.Contains(status, "up to a minute")
		if frozen && time.Since(froze) >= 6*time.Second {
			require.NoError(t, f.env.Redis.Resume())
			frozen = false
		}
		require.Less(t, time.Since(froze), 90*time.Second, "no outcome 90 s after the press (said %q)", said)
		time.Sleep(50 * time.Millisecond) // the sampling's step
	}
	t.Logf("the page said, in turn: %q", said)
	require.True(t, long, "after about 5 s the page says the check may take a minute")
	orders := f.do("GET", "/v1/orders?voucher_id="+id, f.token("alice"), "")
	require.Equal(t, http.StatusOK, orders.Status, orders.Raw)
	require.Len(t, orders.Body["orders"], 1, "one press, one order")
	require.Contains(t, a.text("#order"), orders.Body["orders"].([]any)[0].(map[string]any)["order_id"].(string))
}
