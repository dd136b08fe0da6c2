package gateway

// The queue page (queuepage/): one page a buyer opens to wait in a
// voucher's room and buy, served from the binary with its script and
// style, no CDN. It holds no data: it reads the API of the gateway that
// served it, with the buyer's token.

import (
	"context"
	"embed"
	"errors"
	"html"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"

	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/rdb"
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
// the voucher's name. It needs no login, so it is limited per client
// address (FLASHSALE_QUEUE_PAGE_RATE), and costs Redis one read a voucher
// every pageNameFor, whoever asks, while fewer than maxPageNames vouchers
// are asked about in that time (past it, the names are read again): an id
// the rooms' index does not name (no voucher) costs none. Whether the voucher exists,
// and has a room, the page's join says.
func (g *Gateway) serveQueuePage(w http.ResponseWriter, r *http.Request) {
	key, ok := g.clientKey(w, r)
	if !ok {
		return
	}
	if ok, wait := g.pages.Allow(key, g.now()); !ok {
		g.metrics.shed.WithLabelValues("page_rate").Inc()
		writeRateLimited(w, wait)
		return
	}
	// A link with an id that is no voucher id is still a page, for a
	// person: voucher 0, which no voucher is, whose page says "this sale
	// does not exist" (texts.js), with 404.
	status := http.StatusOK
	id, err := httpapi.PathID(r)
	if err != nil {
		id, status = 0, http.StatusNotFound
	}
	page, _ := queueFiles.ReadFile("queuepage/page.html")
	var face rdb.VoucherFace
	if id > 0 && !errors.Is(g.rooms.Indexed(id), rdb.ErrVoucherNotFound) {
		face = g.pageFaces.of(r.Context(), id, g.now(), func(ctx context.Context) (rdb.VoucherFace, error) {
			face, err := g.redis.Face(ctx, id)
			if err != nil { // the page says "voucher N" instead
				g.log.Warn("queue page: could not read the voucher's name", zap.Int64("voucher_id", id), zap.Error(err))
			}
			return face, err
		})
	}
	opens := ""
	if face.OpensMs > 0 {
		opens = strconv.FormatInt(face.OpensMs, 10)
	}
	// Every slot filled in one pass over the template: what a slot is
	// filled with (a voucher named "{{EMBED_ORIGINS}}") is never read as
	// another slot.
	fill := strings.NewReplacer("{{VOUCHER_ID}}", strconv.FormatInt(id, 10), "{{VOUCHER_NAME}}", html.EscapeString(face.Name), "{{OPENS_AT}}", opens,
		"{{EMBED_ORIGINS}}", html.EscapeString(strings.Join(g.cfg.QueueEmbedOrigins, " ")))
	g.queuePageHeaders(w.Header())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = fill.WriteString(w, string(page))
}

// pageNameFor is how long the queue page keeps a voucher's name, and
// maxPageNames how many it keeps.
const (
	pageNameFor  = 10 * time.Second
	maxPageNames = 10_000
)

// pageFaces are the vouchers' names (and room openings) the queue page
// read lately: one read a voucher per pageNameFor, shared by the pages
// asked meanwhile.
type pageFaces struct {
	mu    sync.Mutex
	names map[int64]pageFace // guarded by mu
	reads singleflight.Group
}

type pageFace struct {
	face rdb.VoucherFace
	at   time.Time
}

// of is voucher id's face (its name, when its room opens), read by read
// when not known since pageNameFor (zero when it cannot be read: not
// kept). A full map is emptied: each face costs one read again, and a
// call O(1) in the mean.
func (n *pageFaces) of(ctx context.Context, id int64, now time.Time, read func(context.Context) (rdb.VoucherFace, error)) rdb.VoucherFace {
	n.mu.Lock()
	p, ok := n.names[id]
	n.mu.Unlock()
	if ok && now.Sub(p.at) < pageNameFor {
		return p.face
	}
	res, _, _ := n.reads.Do(strconv.FormatInt(id, 10), func() (any, error) {
		face, err := read(ctx)
		if err == nil {
			n.mu.Lock()
			if n.names == nil || len(n.names) >= maxPageNames {
				n.names = map[int64]pageFace{}
			}
			n.names[id] = pageFace{face: face, at: now}
			n.mu.Unlock()
		}
		return face, nil
	})
	return res.(rdb.VoucherFace)
}

// serveQueueAsset: GET /queue/assets/{name}, the page's script and style.
func (g *Gateway) serveQueueAsset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	typ, ok := queueAssets[name]
	if !ok {
		httpapi.WriteError(w, httpapi.NewError(http.StatusNotFound, "not_found", "no such endpoint"))
		return
	}
	b, _ := queueFiles.ReadFile("queuepage/" + name)
	g.queuePageHeaders(w.Header())
	w.Header().Set("Content-Type", typ)
	_, _ = w.Write(b)
}
