package gateway

import (
	"crypto/subtle"
	"net/http"
	"strings"
	"time"

	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
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
