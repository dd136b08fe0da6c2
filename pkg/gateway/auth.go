package gateway

// Who asks: a user (their token, then their rate) or the operator (the
// admin or events read token, failures throttled per address), and the
// id in the path.

import (
	"crypto/subtle"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/ratelimit"
	"github.com/flashsale/flashsale/pkg/token"
)

// auth is the gateway's face of authentication: the bearer token of a
// request, verified by pkg/token for a user, or compared with the admin
// token.
type auth struct {
	users      *token.Verifier
	adminToken []byte
	// eventsToken (FLASHSALE_EVENTS_READ_TOKEN, optional) reads the
	// order events and the sinks' state, and nothing else of /admin.
	eventsToken []byte
}

func bearer(r *http.Request) (string, bool) {
	h := httpapi.HeaderValue(r, "Authorization")
	if len(h) < 7 || !strings.EqualFold(h[:7], "bearer ") {
		return "", false
	}
	return strings.TrimSpace(h[7:]), true
}

// user returns the user id (the token's sub) of a request.
func (a *auth) user(r *http.Request) (string, error) {
	raw, ok := bearer(r)
	if !ok || len(raw) > 4096 {
		return "", errUnauthorized
	}
	sub, err := a.users.Verify(raw)
	if err != nil {
		return "", errUnauthorized
	}
	if !httpapi.ValidUser(sub) {
		return "", httpapi.NewError(http.StatusUnauthorized, "unauthorized", "the token's sub must be 1-64 characters of A-Z a-z 0-9 _ . @ -")
	}
	return sub, nil
}

// errEventsOnly refuses the events read token a route it does not open.
var errEventsOnly = httpapi.NewError(http.StatusForbidden, "forbidden", "this token reads the order events only (FLASHSALE_EVENTS_READ_TOKEN)")

// admin checks the admin bearer token; the events read token is known
// and refused (errEventsOnly).
func (a *auth) admin(r *http.Request) error {
	raw, ok := bearer(r)
	switch {
	case !ok:
		return errUnauthorized
	case subtle.ConstantTimeCompare([]byte(raw), a.adminToken) == 1:
		return nil
	case len(a.eventsToken) > 0 && subtle.ConstantTimeCompare([]byte(raw), a.eventsToken) == 1:
		return errEventsOnly
	}
	return errUnauthorized
}

// eventsReader checks a token that may read the order events: the admin
// token or the events read token.
func (a *auth) eventsReader(r *http.Request) error {
	if err := a.admin(r); err != errEventsOnly {
		return err
	}
	return nil
}

// SignUserToken makes a user token as flashsale expects it (token.SignUser);
// for tests, the demo and load generators.
func SignUserToken(secret, user string, exp time.Time) (string, error) {
	return token.SignUser(secret, user, exp)
}

// SignUserTokenFor is SignUserToken with an iss and an aud (token.SignUserFor).
func SignUserTokenFor(secret, user, issuer, audience string, exp time.Time) (string, error) {
	return token.SignUserFor(secret, user, issuer, audience, exp)
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
