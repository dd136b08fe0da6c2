package gateway

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// auth verifies users' JWTs and the admin token.
//
// A user token is verified by one of two paths that accept and refuse
// exactly the same tokens (FuzzFastPathAgreesWithGolangJWT): tokens with
// the canonical HS256 header go through hs256 (the claim path's fast
// path), every other through golang-jwt. Both decode the claims into
// tokenClaims and run the same jwt.Validator, so the policy below holds on
// both:
//   - exp required, nbf honoured; iss and aud checked when configured;
//   - a lifetime (exp - iat, or exp - now without iat) above maxLifetime
//     refused, so a stolen token is not good for years; an iat more than
//     maxClockSkew ahead of now refused, so iat cannot stretch that bound;
//   - exp, nbf and iat outside years 1-9999 (1e300, an overflow) refused;
//   - a crit header refused (RFC 7515 4.1.11: we understand no extension);
//   - HS256 with the current or the previous secret (a rollover); RS256,
//     ES256 and EdDSA with the key set's key named by kid.
type auth struct {
	secrets    [][]byte // current, then previous (if any)
	adminToken []byte
	jwks       map[string]jwk
	parser     *jwt.Parser
	validator  *jwt.Validator
	fast       *hs256
	policy     *tokenPolicy
}

// tokenPolicy is what a token's claims are held to beyond golang-jwt's
// own checks.
type tokenPolicy struct {
	maxLifetime time.Duration
	now         func() time.Time
}

type authConfig struct {
	secret, previousSecret, adminToken string
	issuer, audience                   string
	maxLifetime                        time.Duration
	jwks                               map[string]jwk
	now                                func() time.Time
}

func newAuth(c authConfig) *auth {
	a := &auth{adminToken: []byte(c.adminToken), jwks: c.jwks, policy: &tokenPolicy{maxLifetime: c.maxLifetime, now: c.now}}
	for _, s := range []string{c.secret, c.previousSecret} {
		if s != "" {
			a.secrets = append(a.secrets, []byte(s))
		}
	}
	opts := []jwt.ParserOption{jwt.WithExpirationRequired(), jwt.WithTimeFunc(c.now)}
	if c.issuer != "" {
		opts = append(opts, jwt.WithIssuer(c.issuer))
	}
	if c.audience != "" {
		opts = append(opts, jwt.WithAudience(c.audience))
	}
	a.validator = jwt.NewValidator(opts...)
	a.parser = jwt.NewParser(append(opts, jwt.WithValidMethods([]string{"HS256", "RS256", "ES256", "EdDSA"}))...)
	if len(a.secrets) > 0 {
		a.fast = newHS256(a.secrets)
	}
	return a
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
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
	sub, err := a.verify(raw)
	if err != nil {
		return "", errUnauthorized
	}
	if !validToken(sub) {
		return "", &apiError{http.StatusUnauthorized, "unauthorized", "the token's sub must be 1-64 characters of A-Z a-z 0-9 _ . @ -"}
	}
	return sub, nil
}

// verify returns the subject of a valid token.
func (a *auth) verify(raw string) (string, error) {
	if a.fast != nil {
		if c, handled, err := a.fast.verify(raw, a.policy); handled {
			if err == nil {
				err = a.validator.Validate(c)
			}
			if err != nil {
				return "", err
			}
			return c.Subject, nil
		}
	}
	return a.verifyGeneral(raw)
}

// verifyGeneral is golang-jwt's path, for every token hs256 does not take.
func (a *auth) verifyGeneral(raw string) (string, error) {
	c := &tokenClaims{policy: a.policy}
	if _, err := a.parser.ParseWithClaims(raw, c, a.key); err != nil {
		return "", err
	}
	return c.Subject, nil
}

var (
	errCritHeader = errors.New("token: crit header (no extension is understood)")
	errUnknownKey = errors.New("token: no key for its alg and kid")
)

// key chooses the verification key of a token by its alg and kid.
func (a *auth) key(t *jwt.Token) (any, error) {
	if _, ok := t.Header["crit"]; ok {
		return nil, errCritHeader
	}
	if t.Method.Alg() == "HS256" {
		if len(a.secrets) == 0 {
			return nil, errUnknownKey
		}
		keys := make([]jwt.VerificationKey, len(a.secrets))
		for i, s := range a.secrets {
			keys[i] = s
		}
		return jwt.VerificationKeySet{Keys: keys}, nil
	}
	kid, _ := t.Header["kid"].(string)
	k, ok := a.jwks[kid]
	if !ok || k.alg != t.Method.Alg() {
		return nil, errUnknownKey
	}
	return k.key, nil
}

// admin checks the admin bearer token.
func (a *auth) admin(r *http.Request) error {
	raw, ok := bearer(r)
	if !ok || subtle.ConstantTimeCompare([]byte(raw), a.adminToken) != 1 {
		return errUnauthorized
	}
	return nil
}

// tokenClaims are a user token's registered claims (RFC 7519), decoded
// the same way on both paths: aud as golang-jwt reads it (a string or an
// array of strings), times as numericDate.
type tokenClaims struct {
	Issuer    string           `json:"iss,omitempty"`
	Subject   string           `json:"sub,omitempty"`
	Audience  jwt.ClaimStrings `json:"aud,omitempty"`
	ExpiresAt *numericDate     `json:"exp,omitempty"`
	NotBefore *numericDate     `json:"nbf,omitempty"`
	IssuedAt  *numericDate     `json:"iat,omitempty"`
	ID        string           `json:"jti,omitempty"`
	policy    *tokenPolicy
}

func (c *tokenClaims) GetExpirationTime() (*jwt.NumericDate, error) { return c.ExpiresAt.jwt(), nil }
func (c *tokenClaims) GetIssuedAt() (*jwt.NumericDate, error)       { return c.IssuedAt.jwt(), nil }
func (c *tokenClaims) GetNotBefore() (*jwt.NumericDate, error)      { return c.NotBefore.jwt(), nil }
func (c *tokenClaims) GetIssuer() (string, error)                   { return c.Issuer, nil }
func (c *tokenClaims) GetSubject() (string, error)                  { return c.Subject, nil }
func (c *tokenClaims) GetAudience() (jwt.ClaimStrings, error)       { return c.Audience, nil }

var (
	errTooLong     = errors.New("token: lifetime above FLASHSALE_JWT_MAX_LIFETIME")
	errIssuedLater = errors.New("token: issued in the future (iat later than now plus the allowed clock skew)")
)

// maxClockSkew is how far ahead of this gateway's clock a token's iat may
// be: an identity provider's clock a little ahead is fine, a token "issued"
// next year is not (its lifetime, exp - iat, would pass the bound while
// exp lies years ahead).
const maxClockSkew = time.Minute

// Validate is the policy jwt.Validator runs after its own checks.
func (c *tokenClaims) Validate() error {
	if c.policy == nil {
		return nil
	}
	now := c.policy.now()
	if c.IssuedAt != nil && c.IssuedAt.After(now.Add(maxClockSkew)) {
		return errIssuedLater
	}
	if c.policy.maxLifetime <= 0 || c.ExpiresAt == nil {
		return nil
	}
	from := now
	if c.IssuedAt != nil {
		from = c.IssuedAt.Time
	}
	if c.ExpiresAt.Sub(from) > c.policy.maxLifetime {
		return errTooLong
	}
	return nil
}

// numericDate is a NumericDate read as golang-jwt reads it (a JSON number,
// or a string holding one, truncated to whole seconds), except that a time
// outside years 1-9999 is refused: golang-jwt would turn 1e300 into an
// int64 overflow, a date far in the past, and so an nbf that is always
// satisfied.
type numericDate struct{ jwt.NumericDate }

// Bounds of a numericDate: 0001-01-01 and 10000-01-01, in Unix seconds.
const (
	minNumericDate = -62135596800
	maxNumericDate = 253402300800
)

var errTimeRange = errors.New("token: a time outside years 1-9999")

func (d *numericDate) UnmarshalJSON(b []byte) error {
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("could not parse NumericDate: %w", err)
	}
	f, err := n.Float64()
	if err != nil {
		return fmt.Errorf("could not convert NumericDate to float: %w", err)
	}
	if math.IsNaN(f) || f < minNumericDate || f >= maxNumericDate {
		return errTimeRange
	}
	round, frac := math.Modf(f)
	d.NumericDate = *jwt.NewNumericDate(time.Unix(int64(round), int64(frac*1e9)))
	return nil
}

func (d *numericDate) jwt() *jwt.NumericDate {
	if d == nil {
		return nil
	}
	return &d.NumericDate
}

// validToken accepts user ids and idempotency keys: 1-64 characters that
// are safe inside a Redis key and a log line.
func validToken(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '@' || c == '-') {
			return false
		}
	}
	return true
}

// SignUserToken makes a user token as flashsale expects it; for tests, the
// demo and load generators (an identity provider issues real ones).
func SignUserToken(secret, user string, exp time.Time) (string, error) {
	return SignUserTokenFor(secret, user, "", "", exp)
}

// SignUserTokenFor is SignUserToken with an iss and an aud (none when
// empty), for a gateway that requires them (FLASHSALE_JWT_ISSUER,
// FLASHSALE_JWT_AUDIENCE).
func SignUserTokenFor(secret, user, issuer, audience string, exp time.Time) (string, error) {
	c := jwt.RegisteredClaims{Subject: user, Issuer: issuer, ExpiresAt: jwt.NewNumericDate(exp)}
	if audience != "" {
		c.Audience = jwt.ClaimStrings{audience}
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(secret))
}
