package gateway_test

import (
	"context"
	"encoding/json"
	"html"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	altcha "github.com/altcha-org/altcha-lib-go"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/proof"
)

// widgetVersion is the ALTCHA widget the browser runs: 2.x is the last
// line that solves the challenges altcha-lib-go v1 makes (3.x moved to a
// new format).
const widgetVersion = "2.3.0"

// altchaWidget returns the widget's script, from the npm registry (npm
// pack), kept in the user's cache directory after the first time.
func altchaWidget(tb testing.TB) []byte {
	tb.Helper()
	cache, err := os.UserCacheDir()
	require.NoError(tb, err)
	dir := filepath.Join(cache, "flashsale", "altcha-"+widgetVersion)
	script := filepath.Join(dir, "package", "dist", "altcha.js")
	if b, err := os.ReadFile(script); err == nil {
		return b
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		tb.Skip("no npm on PATH to fetch the ALTCHA widget: apt-get install -y npm")
	}
	tmp := tb.TempDir()
	out, err := exec.Command(npm, "pack", "altcha@"+widgetVersion, "--pack-destination", tmp).CombinedOutput()
	require.NoError(tb, err, "npm pack altcha@%s: %s", widgetVersion, out)
	require.NoError(tb, os.MkdirAll(dir, 0o755))
	out, err = exec.Command("tar", "xzf", filepath.Join(tmp, "altcha-"+widgetVersion+".tgz"), "-C", dir).CombinedOutput()
	require.NoError(tb, err, "%s", out)
	b, err := os.ReadFile(script)
	require.NoError(tb, err)
	return b
}

// widgetPage serves the widget and a page that solves one challenge with
// it as soon as it loads, recording the time from "verifying" to
// "verified" and the payload it would submit.
type widgetPage struct {
	srv *httptest.Server
	mu  sync.Mutex
	c   string // the challenge's JSON
}

func newWidgetPage(tb testing.TB) *widgetPage {
	js := altchaWidget(tb)
	p := &widgetPage{}
	mux := http.NewServeMux()
	mux.HandleFunc("/altcha.js", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		_, _ = w.Write(js)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		p.mu.Lock()
		c := p.c
		p.mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte(`<!doctype html><html><body>
<script>
window.solved = null;
document.addEventListener("DOMContentLoaded", () => {
  const w = document.getElementById("w");
  let t0 = 0;
  w.addEventListener("statechange", (e) => {
    if (e.detail.state === "verifying") t0 = performance.now();
    if (e.detail.state === "verified") window.solved = {ms: performance.now() - t0, payload: e.detail.payload};
    if (e.detail.state === "error") window.solved = {error: "widget error"};
  });
});
</script>
<altcha-widget id="w" auto="onload" challengejson="` + html.EscapeString(c) + `"></altcha-widget>
<script type="module" src="/altcha.js"></script>
</body></html>`))
	})
	p.srv = httptest.NewServer(mux)
	tb.Cleanup(p.srv.Close)
	return p
}

// browser starts headless chromium.
func browser(tb testing.TB, bin string) context.Context {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	tb.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	tb.Cleanup(cancelBrowser)
	// Start it on this context: the first Run's context owns the browser,
	// and each solve's runs on a child with a timeout.
	require.NoError(tb, chromedp.Run(bctx))
	return bctx
}

// solve has the widget solve c in the browser: the payload and the
// widget's own solving time.
func (p *widgetPage) solve(tb testing.TB, bctx context.Context, c altcha.Challenge) (string, time.Duration) {
	tb.Helper()
	b, err := json.Marshal(c)
	require.NoError(tb, err)
	p.mu.Lock()
	p.c = string(b)
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	var res struct {
		MS      float64 `json:"ms"`
		Payload string  `json:"payload"`
		Error   string  `json:"error"`
	}
	require.NoError(tb, chromedp.Run(ctx, chromedp.Navigate(p.srv.URL+"/"),
		chromedp.Poll(`window.solved`, &res, chromedp.WithPollingTimeout(50*time.Second))))
	require.Empty(tb, res.Error)
	require.NotEmpty(tb, res.Payload)
	return res.Payload, time.Duration(res.MS * float64(time.Millisecond))
}

// The ALTCHA widget, in headless Chromium, solves a challenge of the
// gateway's, and the gateway admits the claim its payload goes with.
func TestTheALTCHAWidgetSolvesTheGatewaysChallenge(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a browser")
	}
	bin := chromium(t)
	page := newWidgetPage(t)
	f := newFixture(t)
	id := f.createVoucher(`{"name":"gated","stock":5,"proof_of_work":{"max_number":50000}}`)
	res := f.do("GET", "/v1/challenge?voucher_id="+id, f.token("alice"), "")
	require.Equal(t, http.StatusOK, res.Status, res.Raw)
	var c altcha.Challenge
	require.NoError(t, json.Unmarshal([]byte(res.Raw), &c))

	payload, took := page.solve(t, browser(t, bin), c)
	t.Logf("the widget solved a challenge of difficulty %d in %s", c.MaxNumber, took)
	require.Equal(t, http.StatusAccepted, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("alice"), "", proof.Header, payload).Status)
}

// The browser's solving time at the default difficulty (well
// under a second): go test -run '^$' -bench ALTCHAWidget -benchtime 10x ./pkg/gateway
func BenchmarkALTCHAWidgetSolve(b *testing.B) {
	bin := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		b.Skip("no chromium on PATH")
	}
	page := newWidgetPage(b)
	bctx := browser(b, bin)
	now := time.Now()
	iss := proof.New([]byte("bench-widget-key-bench-widget-key!!"), time.Hour, func() time.Time { return now })
	var times []time.Duration
	for b.Loop() {
		c, err := iss.Challenge("u", 1, gateway.PowMaxNumberDefault)
		require.NoError(b, err)
		payload, took := page.solve(b, bctx, c)
		if _, err := iss.Verify(payload, "u", 1); err != nil {
			b.Fatal(err)
		}
		times = append(times, took)
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	var sum time.Duration
	for _, d := range times {
		sum += d
	}
	b.ReportMetric(float64(sum.Milliseconds())/float64(len(times)), "ms/solve")
	b.ReportMetric(float64(times[len(times)-1].Milliseconds()), "max-ms")
}
