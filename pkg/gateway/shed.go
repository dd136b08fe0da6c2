package gateway

// Shedding: what is refused before any work, and the bounds on the work
// that waits on MySQL.

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/ratelimit"
)

// shed answers 411 length_required, closing the connection, to a body
// sent with Transfer-Encoding (an HTTP/1.0 request's too: framing.go);
// then 503 overloaded at once when
// MaxInflight requests are being served, then 429 rate_limited to an
// address over FLASHSALE_IP_RATE; all before any work (authentication,
// Redis) is done.
func (g *Gateway) shed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TransferEncoding != nil {
			refuseFraming(w, errLengthRequired)
			return
		}
		if r.ProtoMajor == 1 && r.ProtoMinor == 0 { // its Transfer-Encoding was dropped: framing.go
			if e := http10Framing(r); e != nil {
				refuseFraming(w, e)
				return
			}
			w.Header().Set("Connection", "close")
		}
		inflight, limit := g.inflightOf(r)
		if inflight.Add(1) > limit {
			inflight.Add(-1)
			g.metrics.shed.WithLabelValues("overloaded").Inc()
			httpapi.WriteError(w, errOverloaded)
			return
		}
		defer inflight.Add(-1)
		key, ok := g.clientKey(w, r)
		if !ok {
			return
		}
		if ok, wait := g.addrs.Allow(key, g.now()); !ok {
			g.metrics.shed.WithLabelValues("ip_rate").Inc()
			writeRateLimited(w, wait)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// errLengthRequired answers a request whose body came with a
// Transfer-Encoding. Go's server reads such a body as chunked and drops a
// Content-Length sent beside it, but a proxy in front may have framed the
// same bytes by that Content-Length: the bytes after the body would be a
// request smuggled past it (RFC 9112 §6.3 and §11.2). The server cannot
// tell the two apart once the header is dropped, and every body this API
// takes is a few bytes a client sends with its length, so every chunked
// body is refused and its connection closed: the bytes after it are
// never read as a request.
var errLengthRequired = httpapi.NewError(http.StatusLengthRequired, "length_required",
	"send the body with a Content-Length, not Transfer-Encoding")

// refuseFraming answers e to a request whose framing is refused, and
// closes its connection: the bytes after it are never read as a request.
func refuseFraming(w http.ResponseWriter, e *httpapi.Error) {
	w.Header().Set("Connection", "close")
	httpapi.WriteError(w, e)
}

// sweepEvery is how often the limiters forget their full buckets: a
// user's bucket is full again a second or two after a claim
// (FLASHSALE_USER_RATE and _BURST's defaults), so a sale's burst of
// distinct users is held about as long (a sweep of 20,000 buckets takes
// about a millisecond).
const sweepEvery = time.Second

// sweepLimiters forgets full buckets every sweepEvery until the returned
// stop is called. It always runs: the failed admin authentications are
// recorded per address whatever the other limits are.
func (g *Gateway) sweepLimiters() (stop func()) {
	return every(sweepEvery, func() {
		now := g.now()
		g.users.Sweep(now)
		g.addrs.Sweep(now)
		g.pages.Sweep(now)
		g.adminFails.Sweep(now)
		g.soldOut.Sweep()
		g.metrics.limiterKeys.WithLabelValues("user").Set(float64(g.users.Keys()))
		g.metrics.limiterKeys.WithLabelValues("ip").Set(float64(g.addrs.Keys()))
	})
}

// every runs f every d in a goroutine of its own until the returned stop
// is called; stop waits for a run in progress and may be called again.
func every(d time.Duration, f func()) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f()
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-finished }) }
}

// The operator's budget: the admin API's requests are counted and bounded
// apart from the buyers', in flight and waiting on MySQL, and wait on a
// MySQL pool of their own (adminMySQLSlots connections, beside
// FLASHSALE_MYSQL_MAX_CONNS), so buyers that fill FLASHSALE_MAX_INFLIGHT,
// FLASHSALE_MYSQL_MAX_INFLIGHT or every connection of their pool never
// shed nor hold up an operator creating, pausing or reading a sale (on the
// public listener or its own). The order events' readers (the events read
// token, or the operator, polling GET /admin/v1/events) have slots and a
// pool of their own (eventsMySQLSlots): a consumer polling hard never
// takes the slot of an operator pausing a sale. A request's token is
// checked before it takes a slot: one without a good token takes none.
// The operator's work is light: these bound a runaway script.
const (
	adminMaxInflight = 256
	adminMySQLSlots  = 8
	eventsMySQLSlots = 4
)

// dbOf is the MySQL pool r's work waits on: the operator's own, apart
// from the buyers' (who may hold every connection of theirs), for a
// request of the admin API.
func (g *Gateway) dbOf(r *http.Request) *db.Store {
	if g.adminDB != nil && byOperator(r) {
		return g.adminDB
	}
	return g.db
}

// byOperator reports a request of the admin API.
func byOperator(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/admin/") }

// inflightOf is the count r is one of, and its bound: the operator's or
// the buyers'.
func (g *Gateway) inflightOf(r *http.Request) (*atomic.Int64, int64) {
	if byOperator(r) {
		return &g.adminInflight, adminMaxInflight
	}
	return &g.inflight, int64(g.cfg.MaxInflight)
}

// mysqlBound runs h, a handler that waits on MySQL, with a deadline of
// MySQLTimeout and at most MySQLMaxInflight such requests at once. One
// more is answered 503 at once: a hung or slow database must not pile up
// goroutines and connections until the gateway falls over, nor hold
// clients for minutes.
func (g *Gateway) mysqlBound(h http.HandlerFunc) http.HandlerFunc {
	return g.mysqlBoundFor(g.cfg.MySQLTimeout, h)
}

// mysqlBoundFor is mysqlBound with a deadline of its own.
func (g *Gateway) mysqlBoundFor(timeout time.Duration, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { g.withMySQL(w, r, timeout, h) }
}

// operatorBound runs h, a route of the admin API that waits on MySQL,
// once its caller's token checks (check), holding one of slots with a
// deadline of timeout.
func (g *Gateway) operatorBound(check func(w http.ResponseWriter, r *http.Request) bool, slots chan struct{}, timeout time.Duration, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if check(w, r) {
			g.withSlot(w, r, slots, timeout, h)
		}
	}
}

// withMySQL runs h holding one of the MySQL slots (the buyers', or the
// operator's for the admin API), with a deadline of timeout.
func (g *Gateway) withMySQL(w http.ResponseWriter, r *http.Request, timeout time.Duration, h http.HandlerFunc) {
	slots := g.mysqlSlots
	if byOperator(r) {
		slots = g.adminSlots
	}
	g.withSlot(w, r, slots, timeout, h)
}

// withSlot runs h holding one of slots, with a deadline of timeout; with
// none free it answers 503 at once. Only requests that wait on nothing
// but MySQL hold a slot: no slot is held while a body arrives from a
// client that has not proved who it is (see body.go).
func (g *Gateway) withSlot(w http.ResponseWriter, r *http.Request, slots chan struct{}, timeout time.Duration, h http.HandlerFunc) {
	select {
	case slots <- struct{}{}:
		defer func() { <-slots }()
	default:
		g.metrics.mysqlShed.Inc()
		httpapi.WriteError(w, errUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	h(w, r.WithContext(ctx))
}

var errBadForwardedFor = httpapi.BadRequest("invalid_forwarded_for",
	"X-Forwarded-For from a trusted proxy has a hop that is not an address: the client cannot be told")

// clientKey is what per-address limits count r under (ratelimit.Key:
// IPv6 by FLASHSALE_IPV6_PREFIX); a trusted proxy's X-Forwarded-For with
// a hop that cannot be read is answered 400 invalid_forwarded_for
// (false), never counted as the proxy, whose bucket everyone behind it
// would share.
func (g *Gateway) clientKey(w http.ResponseWriter, r *http.Request) (string, bool) {
	key, ok := ratelimit.Key(r, g.trusted, g.cfg.IPv6Prefix)
	if !ok {
		g.metrics.shed.WithLabelValues("forwarded_for").Inc()
		httpapi.WriteError(w, errBadForwardedFor)
	}
	return key, ok
}
