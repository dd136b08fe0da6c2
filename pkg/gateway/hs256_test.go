package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
)

// The fast path must accept and refuse exactly what golang-jwt does.
func TestFastHS256AgreesWithGolangJWT(t *testing.T) {
	secret := "0123456789abcdef0123456789abcdef"
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	a := newAuth(secret, "admin", func() time.Time { return now })
	sign := func(key string, claims jwt.MapClaims) string {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(key))
		require.NoError(t, err)
		return tok
	}
	exp := float64(now.Add(time.Hour).Unix())
	good := sign(secret, jwt.MapClaims{"sub": "alice", "exp": exp})
	require.True(t, strings.HasPrefix(good, canonicalHS256Header+"."), "golang-jwt writes the canonical header")
	parts := strings.Split(good, ".")
	tokens := map[string]string{
		"good":                good,
		"fractional exp":      sign(secret, jwt.MapClaims{"sub": "alice", "exp": float64(now.Unix()) + 0.5}),
		"expired":             sign(secret, jwt.MapClaims{"sub": "alice", "exp": float64(now.Unix())}),
		"no exp":              sign(secret, jwt.MapClaims{"sub": "alice"}),
		"exp as string":       sign(secret, jwt.MapClaims{"sub": "alice", "exp": "soon"}),
		"not yet valid":       sign(secret, jwt.MapClaims{"sub": "alice", "exp": exp, "nbf": float64(now.Add(time.Minute).Unix())}),
		"valid nbf":           sign(secret, jwt.MapClaims{"sub": "alice", "exp": exp, "nbf": float64(now.Add(-time.Minute).Unix())}),
		"wrong key":           sign("another-key-another-key-another-k", jwt.MapClaims{"sub": "alice", "exp": exp}),
		"tampered payload":    parts[0] + "." + sign(secret, jwt.MapClaims{"sub": "mallory", "exp": exp})[len(parts[0])+1:len(parts[0])+1+len(parts[1])] + "." + parts[2],
		"truncated signature": good[:len(good)-2],
		"extra segment":       good + ".x",
		"two segments":        parts[0] + "." + parts[1],
		"padded signature":    good + "=",
		"garbage payload":     parts[0] + ".!!!." + parts[2],
		"sub as number":       sign(secret, jwt.MapClaims{"sub": 42, "exp": exp}),
		"other header key order": func() string {
			tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "bob", "exp": exp})
			tok.Header["kid"] = "k1"
			s, err := tok.SignedString([]byte(secret))
			require.NoError(t, err)
			return s
		}(),
	}
	parser := jwt.NewParser(jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired(), jwt.WithTimeFunc(func() time.Time { return now }))
	for name, tok := range tokens {
		t.Run(name, func(t *testing.T) {
			var c jwt.RegisteredClaims
			_, refErr := parser.ParseWithClaims(tok, &c, func(*jwt.Token) (any, error) { return []byte(secret), nil })
			sub, fast, err := a.fast.verify(tok, now)
			if !fast {
				return // not canonical: golang-jwt decides, nothing to compare
			}
			require.Equal(t, refErr == nil, err == nil, "golang-jwt: %v, fast path: %v", refErr, err)
			if err == nil {
				require.Equal(t, c.Subject, sub)
			}
		})
	}
}
