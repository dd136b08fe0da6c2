package gateway_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
)

// The queue page in headless Chromium, two buyers of a one-unit sale
// behind a gated room: the first opens the page with its token in the
// URL's fragment, solves the voucher's proof of work in the page, is
// admitted, buys with the keyboard and sees its order persisted; the
// second, on a phone-sized screen, waits at position 1 and is told sold
// out. QUEUE_SCREENSHOTS=dir keeps a screenshot of each state a buyer
// meets (docs/queue/*.png are those; docs/queue.png, in the README, is
// one taken while the room still gave an estimate).
func TestTheQueuePageInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a browser")
	}
	bin := chromium(t)
	f := newFixture(t)
	id := f.createVoucher(`{"name":"Sneaker drop","stock":1,"waiting_room":{"admit_per_second":1},"proof_of_work":{"max_number":3000}}`)
	f.followTime() // the room admits one a second as time goes
	bctx := browser(t, bin)
	bctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	defer cancel()
	text := func(tab context.Context, sel string) string { return pageText(t, tab, sel) }
	waitText := func(tab context.Context, sel, want string) {
		t.Helper()
		waitPageText(t, tab, 30*time.Second, sel, want)
	}

	// The first buyer: admitted (the first to join; then one pass is out
	// for the one unit, and the room admits nobody more while it holds),
	// the buy button focused.
	a, cancelA := chromedp.NewContext(bctx)
	defer cancelA()
	// From the shop's product page: the way back, once bought, is its origin.
	require.NoError(t, chromedp.Run(a, chromedp.ActionFunc(func(ctx context.Context) error {
		_, _, _, _, err := page.Navigate(f.srv.URL + "/queue/" + id + "#token=" + f.token("alice")).WithReferrer("http://shop.example/sneakers?u=alice").Do(ctx)
		return err
	})))
	waitText(a, "#status", "It is your turn")
	require.Equal(t, "Queue for Sneaker drop", text(a, "#title"), "the product's name, not its id")
	require.Equal(t, f.srv.URL+"/queue/"+id, strings.TrimSuffix(mustLocation(t, a), "#"), "the token left the address bar")
	var focused string
	require.NoError(t, chromedp.Run(a, chromedp.Evaluate(`document.activeElement.id`, &focused)))
	require.Equal(t, "buy", focused, "the buy button has the focus: Enter buys")
	waitText(a, "#pass", "Your turn holds for")
	require.Regexp(t, `^Your turn holds for [0-9]+:[0-5][0-9] more\.$`, text(a, "#pass"), "a countdown to the pass's end")
	var figures string
	require.NoError(t, chromedp.Run(a, chromedp.Evaluate(`getComputedStyle(document.getElementById("figures")).display`, &figures)))
	require.Equal(t, "none", figures, "no stale position or estimate beside the turn")

	// The second buyer, on a phone: in the queue behind the first.
	b, cancelB := chromedp.NewContext(bctx)
	defer cancelB()
	require.NoError(t, chromedp.Run(b, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile),
		emulation.SetTouchEmulationEnabled(true),
		chromedp.Navigate(f.srv.URL+"/queue/"+id+"#token="+f.token("bob"))))
	waitText(b, "#position", "1")
	require.Equal(t, "You are in the queue.", text(b, "#status"))
	var fits bool
	require.NoError(t, chromedp.Run(b, chromedp.Evaluate(`document.documentElement.scrollWidth <= document.documentElement.clientWidth`, &fits)))
	require.True(t, fits, "the page fits a phone's width")
	// Nobody is admitted while alice's pass holds the one unit: once the
	// room has seen no admission for a while it gives no estimate, and
	// the page says why (it said "estimating…" for as long as the pass
	// held).
	waitText(b, "#eta", "those ahead of you may still buy the units left")
	shot := func(tab context.Context, name string) {
		t.Helper()
		if dir := os.Getenv("QUEUE_SCREENSHOTS"); dir != "" {
			var png []byte
			require.NoError(t, chromedp.Run(tab, chromedp.FullScreenshot(&png, 100)))
			require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
		}
	}
	shot(b, "waiting")
	shot(a, "admitted")

	// The first buys with the keyboard, and sees the order persisted.
	require.NoError(t, chromedp.Run(a, chromedp.KeyEvent(kb.Enter)))
	waitText(a, "#order", "is being placed")
	f.persist(id)
	waitText(a, "#order", "Pay before")
	orders := f.do("GET", "/v1/orders?voucher_id="+id, f.token("alice"), "")
	require.Equal(t, http.StatusOK, orders.Status, orders.Raw)
	require.Len(t, orders.Body["orders"], 1)
	orderID := orders.Body["orders"].([]any)[0].(map[string]any)["order_id"].(string)
	require.Contains(t, text(a, "#order"), orderID)
	require.NotContains(t, text(a, "#order"), "created", "no status word a buyer cannot read")
	require.Equal(t, "Thank you.", text(a, "#status"), "the order is said once, in its own line")
	require.Equal(t, "Your order of Sneaker drop", text(a, "#title"), "the heading follows the state")
	var way struct{ Href, Text string }
	require.NoError(t, chromedp.Run(a, chromedp.Evaluate(`({href: document.getElementById("back-link").href, text: document.getElementById("back").hidden ? "" : document.getElementById("back-link").textContent})`, &way)))
	require.Equal(t, "http://shop.example/", way.Href, "the shop's origin, not the page the buyer came from")
	require.Equal(t, "Back to the shop", way.Text)
	var passShown bool
	require.NoError(t, chromedp.Run(a, chromedp.Evaluate(`!document.getElementById("pass").hidden`, &passShown)))
	require.False(t, passShown, "no countdown once bought")
	shot(a, "bought")

	// The buyer comes back: the page shows the order, not a turn to buy
	// (it had said "It is your turn: buy now", and Buy answered user_limit).
	back, cancelBack := chromedp.NewContext(bctx)
	defer cancelBack()
	require.NoError(t, chromedp.Run(back, chromedp.Navigate(f.srv.URL+"/queue/"+id+"#token="+f.token("alice"))))
	waitText(back, "#order", orderID)
	require.Contains(t, text(back, "#order"), "Pay before")
	require.Equal(t, "Your order of Sneaker drop", text(back, "#title"))
	var buyBack bool
	require.NoError(t, chromedp.Run(back, chromedp.Evaluate(`!document.getElementById("buy").hidden`, &buyBack)))
	require.False(t, buyBack, "no buy button for a buyer who holds the order")
	require.NotContains(t, text(back, "#status"), "your turn")
	// Paid: the page says so.
	require.Equal(t, http.StatusOK, f.do("POST", "/v1/orders/"+orderID+"/pay", f.token("alice"), "").Status)
	paid, cancelPaid := chromedp.NewContext(bctx)
	defer cancelPaid()
	require.NoError(t, chromedp.Run(paid, chromedp.Navigate(f.srv.URL+"/queue/"+id+"#token="+f.token("alice"))))
	waitText(paid, "#order", "is paid")
	shot(paid, "paid")

	// The second is told.
	waitText(b, "#status", "Sold out")
	shot(b, "sold-out")

	// A voucher without a room: the page says so and lets the buyer claim.
	plain := f.createVoucher(`{"name":"Socks & \"Co\" <3","stock":3}`)
	c, cancelC := chromedp.NewContext(bctx)
	defer cancelC()
	require.NoError(t, chromedp.Run(c, chromedp.Navigate(f.srv.URL+"/queue/"+plain+"#token="+f.token("carol"))))
	waitText(c, "#status", "This sale has no queue")
	require.Equal(t, `Buy Socks & "Co" <3`, text(c, "#title"), "no queue in the heading; the name as text, never as markup")
	shot(c, "no-room")
	require.NoError(t, chromedp.Run(c, chromedp.KeyEvent(kb.Enter)))
	waitText(c, "#order", "is being placed")

	// A turn not taken lapses: the page says so and offers no buy.
	lapsing := f.createVoucher(`{"name":"Hoodie","stock":5,"waiting_room":{"admit_per_second":5,"pass_seconds":1}}`)
	d, cancelD := chromedp.NewContext(bctx)
	defer cancelD()
	require.NoError(t, chromedp.Run(d, chromedp.Navigate(f.srv.URL+"/queue/"+lapsing+"#token="+f.token("dave"))))
	waitText(d, "#status", "It is your turn")
	waitText(d, "#status", "Your turn has passed")
	var buyShown bool
	require.NoError(t, chromedp.Run(d, chromedp.Evaluate(`!document.getElementById("buy").hidden`, &buyShown)))
	require.False(t, buyShown, "no buy once the turn has passed")
	shot(d, "lapsed")

	// A sale that ends while the buyer waits: the page says it has ended.
	ends := time.Now().Add(3 * time.Second).UTC().Format(time.RFC3339)
	closing := f.createVoucher(`{"name":"Cap","stock":5,"ends_at":"` + ends + `","waiting_room":{"admit_per_second":5}}`)
	e, cancelE := chromedp.NewContext(bctx)
	defer cancelE()
	require.NoError(t, chromedp.Run(e, chromedp.Navigate(f.srv.URL+"/queue/"+closing+"#token="+f.token("erin"))))
	waitText(e, "#status", "The sale has ended")
	shot(e, "closed")

	// Before the room opens: when it opens, in the buyer's time, a
	// countdown, then the page joins by itself.
	// It opens 15 s after its creation: room enough for a busy machine to
	// load the page before then.
	starts := time.Now().Add(20 * time.Second).UTC()
	early := f.createVoucher(`{"name":"Console drop","stock":5,"starts_at":"` + starts.Format(time.RFC3339Nano) +
		`","waiting_room":{"admit_per_second":5,"prequeue_seconds":5}}`)
	k, cancelK := chromedp.NewContext(bctx)
	defer cancelK()
	require.NoError(t, chromedp.Run(k, chromedp.Navigate(f.srv.URL+"/queue/"+early+"#token="+f.token("kim"))))
	waitText(k, "#status", "The queue opens at")
	require.Regexp(t, `in 0:[01][0-9]\. Keep this page open`, text(k, "#status"), "a countdown")
	shot(k, "before-start")
	waitText(k, "#status", "You are in the queue")

	// The operator pauses the sale: the buyer is told, keeps the place,
	// and hears the sale go on when it resumes.
	for _, op := range []string{"pause", "resume"} {
		res := f.do("POST", "/admin/v1/vouchers/"+early+"/"+op, admin, "")
		require.Equal(t, http.StatusOK, res.Status, res.Raw)
		if op == "pause" {
			waitText(k, "#status", "The sale is paused")
			shot(k, "paused")
		}
	}
	testenv.Eventually(t, 30*time.Second, "the queue again after the resume", func() bool {
		s := text(k, "#status")
		return strings.Contains(s, "You are in the queue") || strings.Contains(s, "It is your turn")
	})

	// A voucher that does not exist: said in the page's words.
	g, cancelG := chromedp.NewContext(bctx)
	defer cancelG()
	require.NoError(t, chromedp.Run(g, chromedp.Navigate(f.srv.URL+"/queue/999999#token="+f.token("frank"))))
	waitText(g, "#status", "This sale does not exist")
	shot(g, "error")

	// No token: how to get in, not a developer's URL.
	h, cancelH := chromedp.NewContext(bctx)
	defer cancelH()
	require.NoError(t, chromedp.Run(h, chromedp.Navigate(f.srv.URL+"/queue/"+id)))
	waitText(h, "#status", "Open this page from the shop")
	require.NotContains(t, text(h, "#status"), "#token=")
	shot(h, "no-token")
}

func mustLocation(t *testing.T, tab context.Context) string {
	var url string
	require.NoError(t, chromedp.Run(tab, chromedp.Location(&url)))
	return url
}

// The page's answers: its own files only, under a strict policy; framed
// only by the origins configured; a bad id is a JSON 400.
func TestTheQueuePagesHeaders(t *testing.T) {
	f := newFixture(t)
	res, err := http.Get(f.srv.URL + "/queue/7")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	csp := res.Header.Get("Content-Security-Policy")
	require.Contains(t, csp, "script-src 'self';")
	require.Contains(t, csp, "connect-src 'self';")
	require.NotContains(t, csp, "unsafe-inline")
	require.Contains(t, csp, "frame-ancestors 'none'")
	require.Equal(t, "DENY", res.Header.Get("X-Frame-Options"))
	for _, asset := range []string{"page.js", "texts.js", "page.css"} {
		r, err := http.Get(f.srv.URL + "/queue/assets/" + asset)
		require.NoError(t, err)
		r.Body.Close()
		require.Equal(t, http.StatusOK, r.StatusCode, asset)
	}
	requireError(t, f.do("GET", "/queue/assets/other.js", "", ""), http.StatusNotFound, "not_found")
	// A link whose id is no voucher id is a page for a person, never JSON.
	for _, bad := range []string{"x", "abc", "-1", "0", "99999999999999999999999"} {
		r, err := http.Get(f.srv.URL + "/queue/" + bad)
		require.NoError(t, err)
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		require.Equal(t, http.StatusNotFound, r.StatusCode, bad)
		require.Equal(t, "text/html; charset=utf-8", r.Header.Get("Content-Type"), bad)
		require.Contains(t, string(body), `data-voucher="0"`, bad)
	}

	embed := newFixtureOn(t, f.env, gateway.Config{QueueEmbedOrigins: []string{"https://shop.example"}})
	res, err = http.Get(embed.srv.URL + "/queue/7")
	require.NoError(t, err)
	res.Body.Close()
	require.Contains(t, res.Header.Get("Content-Security-Policy"), "frame-ancestors https://shop.example")
	require.Empty(t, res.Header.Get("X-Frame-Options"))
}

// The page's slots are filled in one pass: a voucher named as another
// slot ("{{EMBED_ORIGINS}}") shows that name, and the embedding origins
// stay the configured ones (the name had been rewritten to them).
func TestTheQueuePagesSlotsAreFilledOnce(t *testing.T) {
	f := newFixtureOn(t, testenv.New(t, 4), gateway.Config{QueueEmbedOrigins: []string{"https://shop.example"}})
	id := f.createVoucher(`{"name":"{{EMBED_ORIGINS}} {{VOUCHER_ID}}","stock":1}`)
	res, err := http.Get(f.srv.URL + "/queue/" + id)
	require.NoError(t, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	page := string(body)
	require.Contains(t, page, `data-name="{{EMBED_ORIGINS}} {{VOUCHER_ID}}"`)
	require.Contains(t, page, `data-embed-origins="https://shop.example"`)
	require.Contains(t, page, `data-voucher="`+id+`"`)
}

// The page needs no login: one client fetched 2,818 pages a second, each
// a read of Redis. It is now limited per client address
// (FLASHSALE_QUEUE_PAGE_RATE, burst twice the rate) and reads a voucher's
// name once per a while whoever asks; an id no voucher has reads nothing.
func TestTheQueuePageIsLimitedAndReadsRedisOnceAVoucher(t *testing.T) {
	f := newFixtureOn(t, testenv.New(t, 4), gateway.Config{QueuePageRate: 5})
	id := f.createVoucher(`{"name":"Lamp","stock":3,"waiting_room":{"admit_per_second":10}}`)
	page := func(v string) int { // from the test's one address
		res, err := http.Get(f.srv.URL + "/queue/" + v)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	var codes []int
	for range 11 {
		codes = append(codes, page(id))
	}
	require.Equal(t, slices.Repeat([]int{http.StatusOK}, 10), codes[:10], "a burst of twice the rate")
	require.Equal(t, http.StatusTooManyRequests, codes[10], "then 429")

	// Many addresses (a gateway behind a trusted proxy): the pages of one
	// voucher read its name once; those of ids no voucher has, never.
	many := newFixtureOn(t, f.env, gateway.Config{TrustedProxies: []string{"127.0.0.1/32", "::1/128"}})
	reads := voucherReads(t, f.env, f.env.RDB.VoucherKey(parseID(t, id)), func() {
		for i := range 200 {
			req, err := http.NewRequest("GET", many.srv.URL+"/queue/"+id, nil)
			require.NoError(t, err)
			req.Header.Set("X-Forwarded-For", "203.0.113."+strconv.Itoa(i%250))
			res, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			require.Equal(t, http.StatusOK, res.StatusCode)
			require.Contains(t, string(body), `data-name="Lamp"`)
			req.URL.Path = "/queue/" + strconv.Itoa(1_000_000+i)
			res, err = http.DefaultClient.Do(req)
			require.NoError(t, err)
			res.Body.Close()
			require.Equal(t, http.StatusOK, res.StatusCode)
		}
	})
	require.Positive(t, reads, "the name read from Redis at least once: the count sees reads")
	require.LessOrEqual(t, reads, 3, "400 pages: the name read once (twice if its time ran out)")
}

// voucherReads counts the reads of the voucher hash key (HGET, HMGET)
// that env's redis-server ran while f ran, from MONITOR on a connection
// of its own: the gateways' own loops read other keys all along (the
// rooms index, once a second), which a count of all reads took in
// whenever f outlasted a second on a busy machine. The end is a marker
// seen in the stream, not a pause.
func voucherReads(t *testing.T, env *testenv.Env, key string, f func()) int {
	t.Helper()
	conn, err := net.Dial("tcp", env.Common.RedisAddr)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(2*time.Minute)))
	_, err = conn.Write([]byte("MONITOR\r\n"))
	require.NoError(t, err)
	rd := bufio.NewReader(conn)
	ok, err := rd.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "+OK\r\n", ok, "MONITOR started before f")
	f()
	const marker = "voucherReads-end"
	require.NoError(t, env.RDB.Client().Echo(context.Background(), marker).Err())
	read := regexp.MustCompile(`(?i)"(?:hget|hmget)" "` + regexp.QuoteMeta(key) + `"`)
	n := 0
	for {
		l, err := rd.ReadString('\n')
		require.NoError(t, err, "MONITOR never showed the marker")
		if strings.Contains(l, marker) {
			return n
		}
		if read.MatchString(l) {
			n++
		}
	}
}

// Everything the buyer reads comes from texts.js: page.js never shows a
// server's sentence (the answers' "message": untranslatable, and one named
// an API field, "prequeue_seconds"), and texts.js names no field.
func TestTheQueuePageShowsNoServerSentence(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("queuepage", "page.js"))
	require.NoError(t, err)
	require.NotRegexp(t, `\.message\b`, string(page), "page.js reads no answer's message")
	texts, err := os.ReadFile(filepath.Join("queuepage", "texts.js"))
	require.NoError(t, err)
	for _, line := range strings.Split(string(texts), "\n") {
		if _, text, ok := strings.Cut(line, `: "`); ok {
			require.NotRegexp(t, `[a-z]+_[a-z]+`, text, "a text names no API field: %s", line)
		}
	}
}
