package gateway

// The queue page (queuepage/): one page a buyer opens to wait in a
// voucher's room and buy, served from the binary with its script and
// style, no CDN. It holds no data and costs no store: it reads the API of
// the gateway that served it, with the buyer's token.

import (
	"embed"
	"html"
	"net/http"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

//go:embed queuepage/page.html queuepage/page.js queuepage/texts.js queuepage/page.css
var queueFiles embed.FS

// queueAssets are the page's script and style, by name, with their type.
var queueAssets = map[string]string{
	"page.js": "text/javascript; charset=utf-8", "texts.js": "text/javascript; charset=utf-8", "page.css": "text/css; charset=utf-8",
}

// queuePageHeaders sets what every answer of the page's sets: nothing
// runs but its own files, nothing is fetched but this gateway, and only
// the origins of FLASHSALE_QUEUE_EMBED_ORIGINS may frame it.
func (g *Gateway) queuePageHeaders(h http.Header) {
	ancestors := "'none'"
	if len(g.cfg.QueueEmbedOrigins) > 0 {
		ancestors = strings.Join(g.cfg.QueueEmbedOrigins, " ")
	} else {
		h.Set("X-Frame-Options", "DENY")
	}
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "+
		"base-uri 'none'; form-action 'none'; frame-ancestors "+ancestors)
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
}

// serveQueuePage: GET /queue/{id}, the page of voucher id's queue, with
// the voucher's name (one read of Redis a page; none a poll). Whether the
// voucher exists, and has a room, the page's join says.
func (g *Gateway) serveQueuePage(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	page, _ := queueFiles.ReadFile("queuepage/page.html")
	name, err := g.redis.VoucherName(r.Context(), id)
	if err != nil { // the page says "voucher N" instead
		g.log.Warn("queue page: could not read the voucher's name", zap.Int64("voucher_id", id), zap.Error(err))
	}
	// Every slot filled in one pass over the template: what a slot is
	// filled with (a voucher named "{{EMBED_ORIGINS}}") is never read as
	// another slot.
	fill := strings.NewReplacer("{{VOUCHER_ID}}", strconv.FormatInt(id, 10), "{{VOUCHER_NAME}}", html.EscapeString(name),
		"{{EMBED_ORIGINS}}", html.EscapeString(strings.Join(g.cfg.QueueEmbedOrigins, " ")))
	g.queuePageHeaders(w.Header())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = fill.WriteString(w, string(page))
}

// serveQueueAsset: GET /queue/assets/{name}, the page's script and style.
func (g *Gateway) serveQueueAsset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	typ, ok := queueAssets[name]
	if !ok {
		writeError(w, &apiError{http.StatusNotFound, "not_found", "no such endpoint"})
		return
	}
	b, _ := queueFiles.ReadFile("queuepage/" + name)
	g.queuePageHeaders(w.Header())
	w.Header().Set("Content-Type", typ)
	_, _ = w.Write(b)
}
