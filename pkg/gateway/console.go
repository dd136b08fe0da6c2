package gateway

import (
	_ "embed"
	"net/http"
	"sync"
	"time"
)

// claimCounts counts this replica's claims by result and rejection
// reason, for the console (Prometheus has the same, for dashboards).
type claimCounts struct {
	mu sync.Mutex
	m  map[string]int64 // "result" or "rejected:reason"
}

func (c *claimCounts) add(result, reason string) {
	key := result
	if reason != "" {
		key += ":" + reason
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]int64{}
	}
	c.m[key]++
	c.mu.Unlock()
}

func (c *claimCounts) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

// stats: GET /admin/v1/stats, this gateway replica's claim counts since it
// started, by result ("rejected:sold_out", ...), and the time; the console
// turns two readings into claims per second.
func (g *Gateway) stats(w http.ResponseWriter, r *http.Request) {
	if !g.admin(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, struct {
		At     time.Time        `json:"at"`
		Claims map[string]int64 `json:"claims"`
	}{g.now().UTC(), g.claimCounts.snapshot()})
}

//go:embed console.html
var consoleHTML []byte

// serveConsole: GET /admin/console, the live console: one page, no build
// step. It holds no data: it asks the operator for the admin token and
// reads the admin API with it, like any other client.
func serveConsole(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	// Only its own script and the admin API: nothing from elsewhere.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:")
	h.Set("X-Frame-Options", "DENY")
	_, _ = w.Write(consoleHTML)
}
