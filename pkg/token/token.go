// Package token verifies users' JWTs: HS256 with a secret (and the
// previous one, during a rotation), or RS256, ES256 and EdDSA with an
// identity provider's key set; an issuer and an audience when configured;
// a bounded lifetime. The gateway asks it for a request's user; it knows
// nothing of HTTP.
package token

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Verifier verifies users' JWTs.
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
type Verifier struct {
	secrets   [][]byte // current, then previous (if any)
	jwks      KeySet
	parser    *jwt.Parser
	validator *jwt.Validator
	fast      *hs256
	policy    *tokenPolicy
}

// tokenPolicy is what a token's claims are held to beyond golang-jwt's
// own checks.
type tokenPolicy struct {
	maxLifetime time.Duration
	now         func() time.Time
}

// Config says which tokens a Verifier accepts.
type Config struct {
	// Secret and PreviousSecret verify HS256 tokens (either may be empty).
	Secret, PreviousSecret string
	// Issuer and Audience, when set, must be the token's iss and in its aud.
	Issuer, Audience string
	// MaxLifetime bounds exp - iat (exp - now without iat); 0: no bound.
	MaxLifetime time.Duration
	// Keys verify RS256, ES256 and EdDSA tokens by their kid.
	Keys KeySet
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// New returns a Verifier of c.
func New(c Config) *Verifier {
	if c.Now == nil {
		c.Now = time.Now
	}
	a := &Verifier{jwks: c.Keys, policy: &tokenPolicy{maxLifetime: c.MaxLifetime, now: c.Now}}
	for _, s := range []string{c.Secret, c.PreviousSecret} {
		if s != "" {
			a.secrets = append(a.secrets, []byte(s))
		}
	}
	opts := []jwt.ParserOption{jwt.WithExpirationRequired(), jwt.WithTimeFunc(c.Now)}
	if c.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(c.Issuer))
	}
	if c.Audience != "" {
		opts = append(opts, jwt.WithAudience(c.Audience))
	}
	a.validator = jwt.NewValidator(opts...)
	a.parser = jwt.NewParser(append(opts, jwt.WithValidMethods([]string{"HS256", "RS256", "ES256", "EdDSA"}))...)
	if len(a.secrets) > 0 {
		a.fast = newHS256(a.secrets)
	}
	return a
}

// Verify returns the subject (sub) of a valid token.
func (a *Verifier) Verify(raw string) (string, error) {
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
func (a *Verifier) verifyGeneral(raw string) (string, error) {
	c := &tokenClaims{policy: a.policy}
	if _, err := a.parser.ParseWithClaims(raw, c, a.key); err != nil {
		return "", err
	}
	return c.Subject, nil
}

var (
	// ErrInvalid means a token the fast path refuses (malformed, or a bad
	// signature); golang-jwt's path returns its own errors.
	ErrInvalid    = errors.New("token: invalid")
	errCritHeader = errors.New("token: crit header (no extension is understood)")
	errUnknownKey = errors.New("token: no key for its alg and kid")
)

// key chooses the verification key of a token by its alg and kid.
func (a *Verifier) key(t *jwt.Token) (any, error) {
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
	// encoding/json hands an Unmarshaler the value's literal, already
	// validated: a number literal is the json.Number decoding it would
	// give, without a second decoder (half the claims' decoding cost).
	// Anything else (a string holding a number, null, an object) is
	// decoded as golang-jwt does.
	var n json.Number
	if len(b) > 0 && (b[0] == '-' || '0' <= b[0] && b[0] <= '9') {
		n = json.Number(b)
	} else if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("could not parse NumericDate: %w", err)
	}
	return d.fromNumber(n)
}

// fromNumber sets d to n seconds, truncated to golang-jwt's precision.
func (d *numericDate) fromNumber(n json.Number) error {
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

// SignUser makes a user token as flashsale expects it; for tests, the
// demo and load generators (an identity provider issues real ones).
func SignUser(secret, user string, exp time.Time) (string, error) {
	return SignUserFor(secret, user, "", "", exp)
}

// SignUserFor is SignUser with an iss and an aud (none when empty), for a
// gateway that requires them (FLASHSALE_JWT_ISSUER, FLASHSALE_JWT_AUDIENCE).
func SignUserFor(secret, user, issuer, audience string, exp time.Time) (string, error) {
	c := jwt.RegisteredClaims{Subject: user, Issuer: issuer, ExpiresAt: jwt.NewNumericDate(exp)}
	if audience != "" {
		c.Audience = jwt.ClaimStrings{audience}
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(secret))
}
