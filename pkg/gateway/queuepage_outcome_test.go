package gateway_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// The queue page finds out by itself what became of a press whose answer
// was late: Redis frozen 12 s, the buyer presses Buy, the claim reaches
// Redis and its reply does not come in time (503 outcome_unknown); the
// page says "Checking your order…" and offers no Buy, and once Redis is
// back it shows the order, without a second press.
func TestTheQueuePageFindsOutALateClaimsOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a browser")
	}
	bin := chromium(t)
	f := outcomeFixture(t, true, time.Minute)
	id := f.createVoucher(`{"name":"Late drop","stock":5,"per_user_limit":1}`)
	// The admission connection open, so the press is written at once.
	f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("warm"), "")
	bctx := browser(t, bin)
	bctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	defer cancel()
	tab, cancelTab := chromedp.NewContext(bctx)
	defer cancelTab()
	text, waitText := pageReader(t, tab)
	buyOffered := func() bool {
		var offered bool
		require.NoError(t, chromedp.Run(tab, chromedp.Evaluate(`(() => { const b = document.getElementById("buy"); return !b.hidden && !b.disabled })()`, &offered)))
		return offered
	}
	require.NoError(t, chromedp.Run(tab, chromedp.Navigate(f.srv.URL+"/queue/"+id+"#token="+f.token("alice"))))
	waitText("#status", "you can buy directly")

	require.NoError(t, f.env.Redis.Pause())
	frozen := true
	defer func() {
		if frozen {
			_ = f.env.Redis.Resume()
		}
	}()
	require.NoError(t, chromedp.Run(tab, chromedp.Click("#buy", chromedp.ByID)))
	waitText("#status", "Checking your order")
	for range 3 { // while Redis is frozen, the page keeps checking and offers nothing
		time.Sleep(time.Second) // the freeze's length, not a wait for the page
		require.Equal(t, "Checking your order…", text("#status"))
		require.False(t, buyOffered(), "Buy offered while the press's outcome is unknown")
	}
	time.Sleep(9 * time.Second) // 12 s in all
	require.NoError(t, f.env.Redis.Resume())
	frozen = false

	waitText("#order", "Your order")
	orders := f.do("GET", "/v1/orders?voucher_id="+id, f.token("alice"), "")
	require.Equal(t, http.StatusOK, orders.Status, orders.Raw)
	require.Len(t, orders.Body["orders"], 1, "one press, one order")
	orderID := orders.Body["orders"].([]any)[0].(map[string]any)["order_id"].(string)
	require.Contains(t, text("#order"), orderID)
	require.False(t, buyOffered(), "no Buy beside the order")
}

// An admitted buyer whose sale is paused is told so, with no Buy and no
// countdown running beside it (a pause does not extend the turn: the page
// says when it still ends), and offered Buy again once it resumes. The
// room answers an admitted buyer's poll with retry_after_ms of at most
// 2 s (room.AdmittedRetry), so the pause is heard within that, from the
// gateway's state of the room.
func TestTheQueuePageOfAnAdmittedBuyerSaysThePause(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a browser")
	}
	bin := chromium(t)
	f := newFixture(t)
	id := f.createVoucher(`{"name":"Paused drop","stock":5,"waiting_room":{"admit_per_second":10}}`)
	f.followTime() // the room admits as time goes
	bctx := browser(t, bin)
	bctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	defer cancel()
	tab, cancelTab := chromedp.NewContext(bctx)
	defer cancelTab()
	text, waitText := pageReader(t, tab)
	shown := func(sel string) bool {
		var v bool
		require.NoError(t, chromedp.Run(tab, chromedp.Evaluate(`!document.querySelector(`+"`"+sel+"`"+`).hidden`, &v)))
		return v
	}
	require.NoError(t, chromedp.Run(tab, chromedp.Navigate(f.srv.URL+"/queue/"+id+"#token="+f.token("alice"))))
	waitText("#status", "It is your turn")
	waitText("#pass", "Your turn holds for")

	require.Equal(t, http.StatusOK, f.do("POST", "/admin/v1/vouchers/"+id+"/pause", admin, "").Status)
	waitText("#status", "The sale is paused")
	require.Contains(t, text("#status"), "does not extend your turn")
	require.False(t, shown("#buy"), "Buy beside a paused sale")
	require.False(t, shown("#pass"), "a countdown running beside a paused sale")

	require.Equal(t, http.StatusOK, f.do("POST", "/admin/v1/vouchers/"+id+"/resume", admin, "").Status)
	waitText("#status", "It is your turn")
	require.True(t, shown("#buy"), "Buy offered again once the sale resumes")
	require.True(t, shown("#pass"))
}

// pageReader reads tab's page: an element's text, and a wait (a minute
// at most) until it holds a text.
func pageReader(t *testing.T, tab context.Context) (text func(sel string) string, waitText func(sel, want string)) {
	text = func(sel string) string { return pageText(t, tab, sel) }
	waitText = func(sel, want string) {
		t.Helper()
		waitPageText(t, tab, 60*time.Second, sel, want)
	}
	return text, waitText
}
