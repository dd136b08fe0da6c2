package operator

import (
	_ "embed"
	"net/http"
	"time"

	"github.com/flashsale/flashsale/api"
	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/history"
)

// HistoryEvery is how often the console's history is sampled.
const HistoryEvery = time.Second

// getHistory: GET /admin/v1/history, what the console charts.
func (a *API) getHistory(w http.ResponseWriter, r *http.Request) {
	if !a.Admin(w, r) {
		return
	}
	points, names := a.History.Read()
	httpapi.WriteJSON(w, http.StatusOK, struct {
		Replica         string            `json:"replica"`
		Since           time.Time         `json:"since"`
		IntervalSeconds float64           `json:"interval_seconds"`
		Vouchers        map[string]string `json:"vouchers"` // id → name, of those charted
		Points          []history.Point   `json:"points"`
	}{a.Replica, a.Refused.Since.UTC(), HistoryEvery.Seconds(), names, points})
}

// stats: GET /admin/v1/stats, this gateway replica's claim counts since it
// started, by result ("rejected:sold_out", ...), and the time: two readings
// make claims per second (the console reads GET /admin/v1/history instead).
func (a *API) stats(w http.ResponseWriter, r *http.Request) {
	if !a.Admin(w, r) {
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, struct {
		At     time.Time        `json:"at"`
		Claims map[string]int64 `json:"claims"`
	}{a.Now().UTC(), a.Claims()})
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

//go:embed index.html
var indexHTML []byte

// ServeIndex serves GET /: a page that says the gateway is up and links
// the console, the API's reference and a queue page. It holds nothing
// secret.
func ServeIndex(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	_, _ = w.Write(indexHTML)
}

// ServeOpenAPI serves GET /openapi.yaml, the API's reference.
func ServeOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(api.OpenAPI)
}
