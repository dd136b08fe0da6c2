package gateway

// Replies and the caller: JSON answers, errors mapped once, and who asks
// (the user or the operator, and the id in the path).

import (
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/ops"
	"github.com/flashsale/flashsale/pkg/ratelimit"
)

// fail answers err, logging what is not the client's doing.
func (g *Gateway) fail(w http.ResponseWriter, r *http.Request, err error) {
	e := toAPIError(err)
	if e.Status >= 500 {
		g.log.Warn("request failed", append(ops.TraceFields(r.Context()),
			zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Error(err))...)
	}
	httpapi.WriteError(w, e)
}

// userAndID authenticates a user request, holds it to the user's rate
// limit and parses its {id}; when it returns false it has answered the
// request.
func (g *Gateway) userAndID(w http.ResponseWriter, r *http.Request) (string, int64, bool) {
	user, ok := g.user(w, r)
	if !ok {
		return "", 0, false
	}
	id, err := httpapi.PathID(r)
	if err != nil {
		g.fail(w, r, err)
		return "", 0, false
	}
	return user, id, true
}

// user authenticates a user request and holds it to the user's rate; it
// answers the request itself when either fails.
func (g *Gateway) user(w http.ResponseWriter, r *http.Request) (string, bool) {
	user, err := g.auth.user(r)
	if err != nil {
		g.fail(w, r, err)
		return "", false
	}
	if ok, wait := g.users.Allow(user, g.now()); !ok {
		g.metrics.shed.WithLabelValues("user_rate").Inc()
		writeRateLimited(w, wait)
		return "", false
	}
	return user, true
}

// Failed admin authentications are throttled per client address: after a
// burst of adminFailBurst wrong tokens, a wrong token is answered 429 (not
// 401) until one try every adminFailEvery is earned back. The throttle acts
// only after a wrong token: a right token is always let through, so an
// operator sharing an address with an attacker (a NAT, kubectl
// port-forward, a proxy not listed in FLASHSALE_TRUSTED_PROXIES) is never
// locked out. The trade-off: a guesser who ignores the 429s still has
// every guess checked, so the defence against guessing is the token's
// length (at least 32 bytes, 256 bits from openssl rand -hex 32); the
// throttle keeps the log and the metric of a guessing run small and
// visible (flashsale_requests_shed_total{reason="admin_auth"}).
const (
	adminFailBurst = 10
	adminFailEvery = 6 * time.Second
)

// admin authenticates an admin request and answers it if it fails:
// 401, or 429 with Retry-After to an address that failed too often.
func (g *Gateway) admin(w http.ResponseWriter, r *http.Request) bool {
	return g.authorized(w, r, g.auth.admin(r))
}

// eventsReader is admin for the routes that read the order events: the
// admin token or FLASHSALE_EVENTS_READ_TOKEN.
func (g *Gateway) eventsReader(w http.ResponseWriter, r *http.Request) bool {
	return g.authorized(w, r, g.auth.eventsReader(r))
}

// authorized answers a request to /admin whose token checked as err: on
// with nil, a 403 for a known token on a route it does not open, and a
// failure counted against the caller's address for any other.
func (g *Gateway) authorized(w http.ResponseWriter, r *http.Request, err error) bool {
	if err == nil {
		return true
	}
	if err == errEventsOnly {
		g.fail(w, r, err)
		return false
	}
	addr := ratelimit.ClientAddr(r, g.trusted)
	key, ok := ratelimit.Key(r, g.trusted, g.cfg.IPv6Prefix)
	if !ok {
		key = addr // refused before routing; this is for the log's sake
	}
	if wait := g.adminFails.Blocked(key, g.now()); wait > 0 {
		g.metrics.shed.WithLabelValues("admin_auth").Inc()
		writeRateLimited(w, wait)
		return false
	}
	g.adminFails.Allow(key, g.now())
	g.log.Warn("admin authentication failed", zap.String("addr", addr), zap.String("path", r.URL.Path))
	g.fail(w, r, err)
	return false
}
