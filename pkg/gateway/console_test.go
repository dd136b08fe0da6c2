package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/wait"
	"github.com/flashsale/flashsale/pkg/worker"
)

// chromium finds Debian's chromium (make test installs it: .ci/ensure-servers.sh).
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium on PATH: apt-get install -y chromium (make test installs it)")
	return ""
}

// The console in a real headless browser, during a sale: it charts this
// replica's claims per second and p99, each voucher's stock and each
// partition's backlog over time, shows each voucher as both stores see
// it and its report, and its buttons pause, resume and top up the sale. CONSOLE_SCREENSHOT=path
// keeps a screenshot of it (docs/console.png is one).
func TestConsoleInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a browser")
	}
	bin := chromium(t)
	f := newFixture(t)
	id := f.createVoucher(`{"name":"Phone launch","stock":5000,"per_user_limit":1}`)
	f.createVoucher(`{"name":"New year envelopes","kind":"envelope","total_amount":100000,"count":500}`)
	drawID := f.createVoucher(`{"name":"Sneaker draw","stock":50,"allocation":"draw","ends_at":"` + f.clock.Now().Add(time.Hour).Format(time.RFC3339) + `"}`)
	require.Equal(t, http.StatusAccepted, f.do("POST", "/v1/vouchers/"+drawID+"/orders", f.token("entrant"), "").Status)
	roomID := f.createVoucher(`{"name":"Console room","stock":50,"waiting_room":{"admit_per_second":1}}`)
	for _, u := range []string{"q1", "q2", "q3"} {
		require.Equal(t, http.StatusOK, f.do("POST", "/v1/vouchers/"+roomID+"/queue", f.token(u), "").Status)
	}

	// A sale in progress: claims keep coming while the console is open,
	// and a worker persists them.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	w, err := worker.New(worker.Config{Consumer: "console-worker", Block: 50 * time.Millisecond}, f.env.RDB, f.env.DB, zaptest.NewLogger(t))
	require.NoError(t, err)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = w.Run(ctx)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			f.clock.Set(time.Now().UTC()) // the gateway's clock follows time: admissions' times are real
			req, _ := http.NewRequestWithContext(ctx, "POST", f.srv.URL+"/v1/vouchers/"+id+"/orders", nil)
			req.Header.Set("Authorization", "Bearer "+f.token("buyer-"+strconv.Itoa(i-i%2))) // every second claim is refused user_limit
			if res, err := http.DefaultClient.Do(req); err == nil {
				res.Body.Close()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	defer wg.Wait()
	defer stop()

	bctx := browserWindow(t, bin, 1366, 768) // a common laptop's screen

	row := `tr[data-voucher="` + id + `"]`
	// The table is rebuilt every second: text reads in one step.
	text := func(sel string) string { return pageText(t, bctx, sel) }
	require.NoError(t, chromedp.Run(bctx,
		chromedp.Navigate(f.srv.URL+"/admin/console"),
		chromedp.SendKeys("#token", admin, chromedp.ByID),
		chromedp.Click("#connect", chromedp.ByID),
		chromedp.WaitVisible(row, chromedp.ByQuery),
	))
	require.Equal(t, "on sale", text(row+" td.state"))
	drawRow := `tr[data-voucher="` + drawID + `"]`
	require.Regexp(t, `^on saledraw: [01] entries$`, text(drawRow+" td.state"), "a draw shows its entries, on a line of their own")
	require.Regexp(t, `^on sale[0-3] buyers? waiting · [0-3] admitted so far · [0-3] with a turn not yet used$`,
		text(`tr[data-voucher="`+roomID+`"] td.state`), "a room shows its waiters, on a line of their own")
	require.Contains(t, text(`#backlog`), "waiting")
	testenv.Eventually(t, 30*time.Second, "the console says no sink is relayed", func() bool {
		return strings.Contains(text(`#sinks`), "no sink relayed")
	})
	_, held, err := f.env.DB.HoldSink(ctx, "kafka", "reaper-a", time.Minute)
	require.NoError(t, err)
	require.True(t, held)
	require.NoError(t, chromedp.Run(bctx, chromedp.WaitVisible(`#sinks span.sink`, chromedp.ByQuery)))
	require.Regexp(t, `^kafka: delivered up to \d+ of \d+`, text(`#sinks`), "each sink and how far it got")

	// The charts have data, a line per series with several points each
	// (the gateway samples every second): admitted claims per second, the
	// p99, the voucher's stock burning down, the backlog of a partition.
	points := func(sel string) int {
		var n int
		err := chromedp.Run(bctx, chromedp.Evaluate(`(() => { const p = document.querySelector(`+strconv.Quote(sel)+`);
			return p ? parseInt(p.dataset.points, 10) : 0 })()`, &n))
		require.NoError(t, err)
		return n
	}
	for _, sel := range []string{`#chart-claims path[data-series="admitted"]`, `#chart-p99 path[data-series="p99"]`,
		`#chart-stock path.series`, `#chart-backlog path.series`} {
		testenv.Eventually(t, 60*time.Second, "three points on "+sel, func() bool { return points(sel) >= 3 })
	}
	// What the stock chart draws is the voucher's stock going down, as the
	// history the page reads says.
	var stockLabel string
	require.NoError(t, chromedp.Run(bctx, chromedp.Evaluate(`document.querySelector("#chart-stock path.series").dataset.series`, &stockLabel)))
	require.Equal(t, "#"+id+" Phone launch", stockLabel)
	hist := f.do("GET", "/admin/v1/history", admin, "")
	var stock []float64
	for _, p := range hist.Body["points"].([]any) {
		// A point whose store reads timed out (a loaded machine) has no stock.
		byVoucher, _ := p.(map[string]any)["stock"].(map[string]any)
		if v, ok := byVoucher[id]; ok {
			stock = append(stock, v.(float64))
		}
	}
	require.GreaterOrEqual(t, len(stock), 3, hist.Raw)
	require.Less(t, stock[len(stock)-1], stock[0], "the stock burns down: %v", stock)

	// The table fits the page.
	var fits bool
	require.NoError(t, chromedp.Run(bctx, chromedp.Evaluate(`document.querySelector("table").scrollWidth <= document.documentElement.clientWidth`, &fits)))
	require.True(t, fits, "the vouchers table is wider than the page")

	// The report, from the row's button.
	clickUntil(t, bctx, row+" button.report", `#report dd[data-field="admitted_orders"]`)
	require.Empty(t, text("#error"))
	admittedText := strings.Fields(text(`#report dd[data-field="admitted_orders"]`))
	require.Len(t, admittedText, 2)
	admitted, err := strconv.Atoi(admittedText[0])
	require.NoError(t, err)
	require.Positive(t, admitted)
	require.Equal(t, "orders", admittedText[1], "a count with its noun")
	// It opens where the operator looks: in the window, at 1366×768.
	var inView bool
	require.NoError(t, chromedp.Run(bctx, chromedp.Evaluate(`(() => { const r = document.getElementById("report").getBoundingClientRect();
		return r.top >= 0 && r.top < window.innerHeight; })()`, &inView)))
	require.True(t, inView, "the report is in the window when it opens")
	// In words: no field names, no JSON.
	report := text("#report")
	require.NotContains(t, report, "_", "reasons and fields as words: %s", report)
	require.NotContains(t, report, "{", "no JSON: %s", report)
	// The charts are legible at 1366 px: at least 600 px wide, their
	// legends' text at least 11 px.
	var chartWidth, legendPx float64
	require.NoError(t, chromedp.Run(bctx, chromedp.Evaluate(`document.getElementById("chart-claims").getBoundingClientRect().width`, &chartWidth),
		chromedp.Evaluate(`(() => { const s = document.getElementById("chart-claims"); const t = s.querySelector("text");
			return t ? parseFloat(getComputedStyle(t).fontSize) * s.getBoundingClientRect().width / 600 : 0; })()`, &legendPx)))
	require.GreaterOrEqual(t, chartWidth, 600.0, "a chart's width at 1366 px")
	require.GreaterOrEqual(t, legendPx, 11.0, "a chart's text, as drawn, at 1366 px")

	// What it shows is what the API says (the numbers move with the sale:
	// compare with a reading taken around the page's).
	apiRemaining := func() int {
		return int(f.do("GET", "/admin/v1/vouchers/"+id, admin, "").Body["remaining_redis"].(float64))
	}
	before := apiRemaining()
	shown, err := strconv.Atoi(text(row + " .remaining-redis"))
	require.NoError(t, err)
	require.LessOrEqual(t, shown, before+1000)
	require.Less(t, shown, 5000, "claims are being admitted")

	if path := os.Getenv("CONSOLE_SCREENSHOT"); path != "" {
		testenv.Eventually(t, 60*time.Second, "25 seconds of history to show", func() bool {
			return points(`#chart-claims path[data-series="admitted"]`) >= 25
		})
		var png []byte
		require.NoError(t, chromedp.Run(bctx, chromedp.FullScreenshot(&png, 100)))
		require.NoError(t, os.WriteFile(path, png, 0o644))
	}

	// Pause: one click only asks, saying what it does; the page then says
	// it is done, and claims answer 409 paused.
	clickUntil(t, bctx, row+" button.pause", "#confirm-yes")
	require.Equal(t, "Pause voucher "+id+" (Phone launch)? Its claims answer 409 paused until you resume it; orders already admitted stand.", text("#confirm-text"))
	require.Equal(t, "on sale", text(row+" td.state"), "nothing done on one click")
	clickUntil(t, bctx, "#confirm-yes", row+" button.resume")
	require.Equal(t, "paused", text(row+" td.state"))
	testenv.Eventually(t, 10*time.Second, "the result said", func() bool { return text("#result") == "Paused voucher "+id+" (Phone launch)." })
	requireError(t, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("late"), ""), http.StatusConflict, "paused")
	stop()
	wg.Wait()

	// Top up by 100, spelled out first, then resume.
	total := func() int {
		return int(f.do("GET", "/admin/v1/vouchers/"+id, admin, "").Body["stock_total"].(float64))
	}
	require.Equal(t, 5000, total())
	clickUntil(t, bctx, row+" button.change", "#change-panel")
	require.NoError(t, chromedp.Run(bctx, chromedp.SendKeys(`#change-form input[name="add"]`, "100", chromedp.ByQuery),
		chromedp.Click("#change-go", chromedp.ByID), chromedp.WaitVisible("#confirm-yes", chromedp.ByID)))
	require.Equal(t, "Change voucher "+id+" (Phone launch): add 100 units (5000 → 5100 in all): they sell at once, and cannot be taken back?", text("#confirm-text"))
	require.Equal(t, 5000, total(), "nothing done before the confirmation")
	require.NoError(t, chromedp.Run(bctx, chromedp.Click("#confirm-yes", chromedp.ByID)))
	testenv.Eventually(t, 20*time.Second, "the total is 5100", func() bool { return total() == 5100 })
	testenv.Eventually(t, 10*time.Second, "the result said", func() bool {
		return text("#result") == "Changed voucher "+id+" (Phone launch): 5100 units in all."
	})
	clickUntil(t, bctx, row+" button.resume", "#confirm-yes")
	clickUntil(t, bctx, "#confirm-yes", row+" button.pause")
	require.Equal(t, http.StatusAccepted, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("after"), "").Status)
	require.Empty(t, text("#error"))

	// The voucher's history: each of the clicks above, by the admin token,
	// newest first.
	clickUntil(t, bctx, row+" button.history", `#report ol.actions li[data-action="voucher resumed"]`)
	var actions []string
	require.NoError(t, chromedp.Run(bctx, chromedp.Evaluate(`[...document.querySelectorAll("#report ol.actions li")].map((li) => li.dataset.action)`, &actions)))
	require.Equal(t, []string{"voucher resumed", "stock added", "voucher paused", "voucher created"}, actions)
	require.Contains(t, text(`#report ol.actions li[data-action="stock added"]`), "admin · stock added: stock_total=5000 → stock_total=5100")

	// The room's link opens its sale's report, with the room's story.
	clickUntil(t, bctx, `tr[data-voucher="`+roomID+`"] button.report`, `#report dd[data-field="queue"]`)
	require.Contains(t, text(`#report dd[data-field="queue"]`), "joined")
}

// browserWindow is a headless Chromium (bin) window of width × height, for
// 150 s at most, closed when the test ends.
func browserWindow(t *testing.T, bin string, width, height int) context.Context {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(width, height))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	bctx, cancelTimeout := context.WithTimeout(bctx, 150*time.Second)
	t.Cleanup(cancelTimeout)
	return bctx
}

// pageText reads the text of sel in tab in one step of the page ("" when
// it is missing or hidden): a node found, then read in a second step, may
// have been replaced in between and read empty.
func pageText(t *testing.T, tab context.Context, sel string) string {
	t.Helper()
	var s string
	require.NoError(t, chromedp.Run(tab, chromedp.Evaluate(`(() => { const n = document.querySelector(`+strconv.Quote(sel)+`);
		return n && !n.hidden ? n.textContent : "" })()`, &s)))
	return strings.TrimSpace(s)
}

// waitPageText waits, timeout at most, until sel's text in tab holds
// want, and fails t saying what the page said instead.
func waitPageText(t *testing.T, tab context.Context, timeout time.Duration, sel, want string) {
	t.Helper()
	require.NoError(t, wait.Until(tab, timeout, fmt.Sprintf("%s to say %q", sel, want), func() (bool, string) {
		got := pageText(t, tab, sel)
		return strings.Contains(got, want), fmt.Sprintf("it says %q (status %q)", got, pageText(t, tab, "#status"))
	}))
}

// clickUntil clicks sel until want is visible. The page redraws its table
// as the sale moves: a click aimed at a row redrawn between finding the
// button and pressing it finds no node, and is tried again (a click that
// landed shows want, and is not repeated).
func clickUntil(t *testing.T, bctx context.Context, sel, want string) {
	t.Helper()
	err := wait.Until(bctx, 30*time.Second, fmt.Sprintf("clicking %s to show %s", sel, want), func() (bool, string) {
		cctx, cancel := context.WithTimeout(bctx, 10*time.Second) // a button not there waits for it no longer
		err := chromedp.Run(cctx, chromedp.Click(sel, chromedp.ByQuery))
		cancel()
		if err == nil {
			wctx, cancel := context.WithTimeout(bctx, 10*time.Second)
			err = chromedp.Run(wctx, chromedp.WaitVisible(want, chromedp.ByQuery))
			cancel()
			if err == nil {
				return true, ""
			}
		}
		var shown bool // shown, not only there: the confirmation's button is always there, hidden until asked
		if e := chromedp.Run(bctx, chromedp.Evaluate(`(() => { const n = document.querySelector(`+strconv.Quote(want)+`);
			return !!n && n.getClientRects().length > 0 })()`, &shown)); e != nil {
			return false, e.Error()
		}
		return shown, fmt.Sprint(err)
	})
	if err != nil {
		var shownError, page string
		_ = chromedp.Run(bctx, chromedp.Text("#error", &shownError, chromedp.ByID), chromedp.Text("body", &page, chromedp.ByQuery))
		require.Fail(t, "clicking never showed", "%v; the page says %q:\n%s", err, shownError, page)
	}
}

// A script opens a live console with the admin token in the URL's
// fragment (never sent to the server, unlike a query): the page connects
// without typing, and takes the token out of the address bar.
func TestConsoleOpensFromTheURLFragment(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a browser")
	}
	bin := chromium(t)
	f := newFixture(t)
	id := f.createVoucher(`{"name":"Fragment","stock":5}`)
	bctx, cancelTimeout := context.WithTimeout(browser(t, bin), 60*time.Second)
	defer cancelTimeout()
	var url string
	require.NoError(t, chromedp.Run(bctx,
		chromedp.Navigate(f.srv.URL+"/admin/console#token="+admin),
		chromedp.WaitVisible(`tr[data-voucher="`+id+`"]`, chromedp.ByQuery),
		chromedp.Location(&url),
	))
	require.Equal(t, f.srv.URL+"/admin/console", url, "the token left the address bar")
}

// The console's state column says what the API's state says, for 20
// vouchers in every state (sold-out vouchers had shown a green "on sale",
// one starting in an hour "on sale"), each series keeps a colour of its
// own among 20 (10 colours had cycled), the claims' outcomes too, and the
// stock chart's legend is in numeric order (#10 had come before #2).
// CONSOLE_STATES_SCREENSHOT=path keeps a screenshot (docs/console-states.png).
func TestTheConsoleStatesAndColours(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a browser")
	}
	bin := chromium(t)
	f := newFixture(t)
	now := f.clock.Now()
	at := func(d time.Duration) string { return now.Add(d).UTC().Format(time.RFC3339) }
	want := map[string]string{}
	for i := range 4 {
		want[f.createVoucher(fmt.Sprintf(`{"name":"scheduled %d","stock":5,"starts_at":"%s"}`, i, at(2*time.Hour)))] = "scheduled"
		want[f.createVoucher(fmt.Sprintf(`{"name":"on sale %d","stock":5}`, i))] = "on sale"
		paused := f.createVoucher(fmt.Sprintf(`{"name":"paused %d","stock":5}`, i))
		require.Equal(t, http.StatusOK, f.do("POST", "/admin/v1/vouchers/"+paused+"/pause", admin, "").Status)
		want[paused] = "paused"
		sold := f.createVoucher(fmt.Sprintf(`{"name":"sold out %d","stock":1}`, i))
		require.Equal(t, http.StatusAccepted, f.do("POST", "/v1/vouchers/"+sold+"/orders", f.token(fmt.Sprintf("b%d", i)), "").Status)
		f.persist(sold)
		want[sold] = "sold out"
		want[f.createVoucher(fmt.Sprintf(`{"name":"ended %d","stock":5,"ends_at":"%s"}`, i, at(time.Hour)))] = "ended"
	}
	// One on sale marked hot, as the reaper's detector marks it: its state
	// carries the mark.
	var hot string
	for id, w := range want {
		if w == "on sale" {
			hot = id
			break
		}
	}
	since := now.Add(-time.Minute).UTC()
	require.NoError(t, f.env.DB.SetHot(t.Context(), parseID(t, hot), &since))
	// Its buckets split by the reaper's splitter (recorded as it records
	// it), and another's split asked, under way.
	split := func(id string, done bool) {
		_, _, err := f.env.DB.AskSplit(t.Context(), parseID(t, id), 4, db.ActorAdmin, func(db.Voucher) error { return nil })
		require.NoError(t, err)
		if done {
			require.NoError(t, f.env.DB.SplitDone(t.Context(), parseID(t, id), 4, now.UTC()))
		}
	}
	split(hot, true)
	want[hot] = "on salehot×4"
	for id, w := range want {
		if w == "on sale" {
			split(id, false)
			want[id] = "on sale→ ×4"
			break
		}
	}
	f.clock.Set(now.Add(90 * time.Minute)) // the ended have ended; the scheduled have not started
	words := map[string]string{"scheduled": "scheduled", "on_sale": "on sale", "paused": "paused", "sold_out": "sold out", "ended": "ended"}
	list := f.do("GET", "/admin/v1/vouchers?limit=50", admin, "")
	require.Equal(t, http.StatusOK, list.Status, list.Raw)
	for _, raw := range list.Body["vouchers"].([]any) {
		v := raw.(map[string]any)
		state, _, _ := strings.Cut(strings.Split(want[v["id"].(string)], "hot")[0], "→") // the marks aside
		require.Equal(t, state, words[v["state"].(string)], "the API's state of %s", v["name"])
		if v["id"] == hot {
			at, err := time.Parse(time.RFC3339Nano, v["hot_since"].(string))
			require.NoError(t, err)
			require.True(t, at.Equal(since), "hot_since %v, marked %v", at, since)
		} else {
			require.NotContains(t, v, "hot_since", "voucher %s is not hot", v["id"])
		}
	}

	bctx := browser(t, bin)
	bctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Run(bctx, chromedp.EmulateViewport(1400, 900),
		chromedp.Navigate(f.srv.URL+"/admin/console"),
		chromedp.SendKeys("#token", admin, chromedp.ByID),
		chromedp.Click("#connect", chromedp.ByID),
		chromedp.WaitVisible(`tr[data-voucher]`, chromedp.ByQuery)))
	testenv.Eventually(t, 30*time.Second, "20 rows", func() bool {
		var n int
		require.NoError(t, chromedp.Run(bctx, chromedp.Evaluate(`document.querySelectorAll("tr[data-voucher]").length`, &n)))
		return n == 20
	})
	for id, w := range want {
		require.Equal(t, w, pageText(t, bctx, `tr[data-voucher="`+id+`"] td.state`), "voucher %s", id)
	}
	// The palettes: 20 series apart, and the outcomes apart, in RGB by
	// more than a near-identical pair (#3 and #8 had been 30 apart).
	var far struct{ Series, Outcomes float64 }
	require.NoError(t, chromedp.Run(bctx, chromedp.Evaluate(`(() => {
		const rgb = (c) => [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16));
		const least = (cs) => { let m = 1e9; for (let i = 0; i < cs.length; i++) for (let j = i + 1; j < cs.length; j++) {
			const a = rgb(cs[i]), b = rgb(cs[j]); m = Math.min(m, Math.hypot(a[0] - b[0], a[1] - b[1], a[2] - b[2])); } return m; };
		return {Series: least(COLORS.slice(0, 20)), Outcomes: least(Object.values(OUTCOME_COLORS))};
	})()`, &far)))
	t.Logf("closest pair of colours: series %.0f, outcomes %.0f", far.Series, far.Outcomes)
	require.Greater(t, far.Series, 60.0, "20 series, each its own colour")
	require.Greater(t, far.Outcomes, 60.0, "every outcome its own colour")
	var legend []string
	require.NoError(t, chromedp.Run(bctx, chromedp.Evaluate(`seriesOf([{at: new Date().toISOString(), stock: {"10": 1, "2": 1, "1": 1}}], "stock", (k) => "#" + k).map((s) => s.name)`, &legend)))
	require.Equal(t, []string{"#1", "#2", "#10"}, legend, "ids in numeric order")
	if path := os.Getenv("CONSOLE_STATES_SCREENSHOT"); path != "" {
		var png []byte
		require.NoError(t, chromedp.Run(bctx, chromedp.FullScreenshot(&png, 100)))
		require.NoError(t, os.WriteFile(path, png, 0o644))
	}
}

// The console runs a sale, at 1366 and at 375 px: its New sale form says
// each refused field beside it in words and creates nothing, a lost
// connection says so, and a double submit creates one sale; the page
// never scrolls sideways, and the claims' legend is in words.
// CONSOLE_SALE_SCREENSHOTS=dir keeps console-1366.png and console-375.png
// (docs/ has them).
func TestTheConsoleRunsASale(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a browser")
	}
	bin := chromium(t)
	f := newFixture(t)
	roomID := f.createVoucher(`{"name":"Phone launch","stock":50,"waiting_room":{"admit_per_second":1}}`)
	require.Equal(t, http.StatusOK, f.do("POST", "/v1/vouchers/"+roomID+"/queue", f.token("q1"), "").Status)
	vouchers := func() int { return len(f.do("GET", "/admin/v1/vouchers", admin, "").Body["vouchers"].([]any)) }
	made := 1
	for _, width := range []int{1366, 375} {
		t.Run(strconv.Itoa(width), func(t *testing.T) {
			bctx := browserWindow(t, bin, width, 900)
			text := func(sel string) string { return pageText(t, bctx, sel) }
			fits := func(what string) {
				t.Helper()
				var wide struct{ Page, Window float64 }
				require.NoError(t, chromedp.Run(bctx, chromedp.Evaluate(`({page: document.documentElement.scrollWidth, window: document.documentElement.clientWidth})`, &wide)))
				require.LessOrEqual(t, wide.Page, wide.Window, "%s: the page scrolls sideways at %d px", what, width)
			}
			require.NoError(t, chromedp.Run(bctx,
				emulation.SetDeviceMetricsOverride(int64(width), 900, 1, width < 600),
				chromedp.Navigate(f.srv.URL+"/admin/console#token="+admin),
				chromedp.WaitVisible(`tr[data-voucher="`+roomID+`"]`, chromedp.ByQuery)))
			fits("the table")
			if width < 600 {
				var label string
				require.NoError(t, chromedp.Run(bctx, chromedp.Evaluate(`getComputedStyle(document.querySelector('tr[data-voucher="`+roomID+`"] td.state'), "::before").content`, &label)))
				require.Equal(t, `"state: "`, label, "each cell says its column on a narrow screen")
			}

			require.NoError(t, chromedp.Run(bctx, chromedp.Click("#new-sale", chromedp.ByID), chromedp.WaitVisible("#sale-form", chromedp.ByID)))
			fits("the form")
			set := func(name, value string) {
				t.Helper()
				require.NoError(t, chromedp.Run(bctx, chromedp.Evaluate(`document.querySelector('#sale-form [name="`+name+`"]').value = `+strconv.Quote(value), nil)))
			}
			submit := func() {
				t.Helper()
				require.NoError(t, chromedp.Run(bctx, chromedp.Click("#create-sale", chromedp.ByID)))
			}
			// Refused, field by field, in words beside the field; nothing created.
			set("name", "")
			set("stock", "0")
			submit()
			testenv.Eventually(t, 10*time.Second, "the name said required", func() bool {
				return text(`.field-error[data-for="name"]`) == "name is required, at most 128 bytes"
			})
			set("name", "Lamp "+strconv.Itoa(width))
			submit()
			testenv.Eventually(t, 10*time.Second, "the stock refused beside it", func() bool {
				return strings.Contains(text(`.field-error[data-for="stock"]`), "stock")
			})
			require.Empty(t, text(`.field-error[data-for="name"]`), "a field no longer refused is cleared")
			require.Equal(t, made, vouchers(), "nothing created")

			// A lost connection: said, nothing created.
			set("stock", "20")
			require.NoError(t, chromedp.Run(bctx, network.Enable(), network.EmulateNetworkConditions(true, 0, -1, -1)))
			submit()
			testenv.Eventually(t, 10*time.Second, "the lost connection said", func() bool {
				return strings.Contains(text("#sale-error"), "The connection was lost")
			})
			require.Equal(t, made, vouchers(), "nothing created offline")
			// Back online, pressed twice at once: one sale.
			require.NoError(t, chromedp.Run(bctx, network.EmulateNetworkConditions(false, 0, -1, -1),
				chromedp.Evaluate(`(() => { const f = document.getElementById("sale-form"); f.requestSubmit(); f.requestSubmit(); })()`, nil)))
			testenv.Eventually(t, 10*time.Second, "the sale created", func() bool { return strings.Contains(text("#result"), "reated: voucher") })
			made++
			require.Equal(t, made, vouchers(), "one sale for two presses")
			require.Regexp(t, `^(Created|Already created): voucher \d+ \(Lamp `+strconv.Itoa(width)+`\), on sale\. Its buyers' queue page: /queue/\d+$`, text("#result"))
			require.NoError(t, chromedp.Run(bctx, chromedp.WaitNotVisible("#sale-form", chromedp.ByID)))
			fits("the new sale listed")

			// Change what a PATCH may: a gate and a room put on, spelled out
			// first, done on the second press.
			lamp := regexp.MustCompile(`voucher (\d+)`).FindStringSubmatch(text("#result"))[1]
			clickUntil(t, bctx, `tr[data-voucher="`+lamp+`"] button.change`, "#change-panel")
			require.NoError(t, chromedp.Run(bctx, chromedp.Evaluate(`(() => { const f = document.getElementById("change-form");
				f.pow.value = "set"; f.pow_number.value = "1000"; f.room.value = "set"; f.room_rate.value = "5"; })()`, nil),
				chromedp.Click("#change-go", chromedp.ByID), chromedp.WaitVisible("#confirm-yes", chromedp.ByID)))
			require.Equal(t, "Change voucher "+lamp+" (Lamp "+strconv.Itoa(width)+"): ask each claim for a proof of work of difficulty 1000 (was none); "+
				"put buyers through a waiting room letting in 5 a second?", text("#confirm-text"))
			fits("the confirmation")
			require.NoError(t, chromedp.Run(bctx, chromedp.Click("#confirm-yes", chromedp.ByID)))
			testenv.Eventually(t, 10*time.Second, "the change said done", func() bool {
				return text("#result") == "Changed voucher "+lamp+" (Lamp "+strconv.Itoa(width)+"): proof of work 1000, waiting room 5 a second."
			})
			got := f.do("GET", "/admin/v1/vouchers/"+lamp, admin, "").Body
			require.EqualValues(t, 1000, got["proof_of_work"].(map[string]any)["max_number"])
			require.EqualValues(t, 5, got["waiting_room"].(map[string]any)["admit_per_second"])

			// The claims' outcomes in words: a refusal (not admitted) while
			// the console watches.
			require.Equal(t, http.StatusForbidden, f.do("POST", "/v1/vouchers/"+roomID+"/orders", f.token("q2"), "").Status)
			var names []string
			testenv.Eventually(t, 20*time.Second, "the claims' legend", func() bool {
				require.NoError(t, chromedp.Run(bctx, chromedp.Evaluate(`[...document.querySelectorAll("#chart-claims text")].map((t) => t.textContent)`, &names)))
				return slices.Contains(names, "refused: not admitted")
			})
			for _, n := range names {
				require.NotContains(t, n, "_", "legend in words: %v", names)
				require.NotContains(t, n, "rejected:", "legend in words: %v", names)
			}
			if dir := os.Getenv("CONSOLE_SALE_SCREENSHOTS"); dir != "" {
				var png []byte
				require.NoError(t, chromedp.Run(bctx, chromedp.FullScreenshot(&png, 100)))
				require.NoError(t, os.WriteFile(filepath.Join(dir, "console-"+strconv.Itoa(width)+".png"), png, 0o644))
			}
		})
	}
}
