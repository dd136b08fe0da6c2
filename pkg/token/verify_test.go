package token

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
)

const testSecret = "0123456789abcdef0123456789abcdef"

var testNow = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC) // fixed date: the verifier's clock in tests of token checks alone; nothing is stored.

func testAuth(mut ...func(*Config)) *Verifier {
	c := Config{Secret: testSecret, MaxLifetime: 24 * time.Hour, Now: func() time.Time { return testNow }}
	for _, m := range mut {
		m(&c)
	}
	return New(c)
}

func sign(t testing.TB, key string, claims jwt.MapClaims) string {
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(key))
	require.NoError(t, err)
	return tok
}

// canonical signs payload, any bytes, under the canonical header.
func canonical(key string, payload []byte) string {
	unsigned := canonicalHS256Header + "." + base64.RawURLEncoding.EncodeToString(payload)
	sig, _ := jwt.SigningMethodHS256.Sign(unsigned, []byte(key))
	return unsigned + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// fastAndGeneral verifies tok on both paths; handled is false when the
// fast path does not take it.
func fastAndGeneral(a *Verifier, tok string) (fastSub string, fastErr error, handled bool, sub string, err error) {
	c, handled, fastErr := a.fast.verify(tok, a.policy)
	if handled && fastErr == nil {
		fastErr = a.validator.Validate(c)
	}
	if handled && fastErr == nil {
		fastSub = c.Subject
	}
	sub, err = a.verifyGeneral(tok)
	return
}

// The fast path accepts and refuses exactly what golang-jwt does, for
// hand-picked tokens (among them the six it once disagreed on).
func TestFastHS256AgreesWithGolangJWT(t *testing.T) {
	a := testAuth()
	exp := float64(testNow.Add(time.Hour).Unix())
	good := sign(t, testSecret, jwt.MapClaims{"sub": "alice", "exp": exp})
	require.True(t, strings.HasPrefix(good, canonicalHS256Header+"."), "golang-jwt writes the canonical header")
	parts := strings.Split(good, ".")
	tokens := map[string]string{
		"good":                     good,
		"fractional exp":           sign(t, testSecret, jwt.MapClaims{"sub": "alice", "exp": float64(testNow.Unix()) + 0.5}),
		"expired":                  sign(t, testSecret, jwt.MapClaims{"sub": "alice", "exp": float64(testNow.Unix())}),
		"no exp":                   sign(t, testSecret, jwt.MapClaims{"sub": "alice"}),
		"exp as string":            sign(t, testSecret, jwt.MapClaims{"sub": "alice", "exp": "soon"}),
		"not yet valid":            sign(t, testSecret, jwt.MapClaims{"sub": "alice", "exp": exp, "nbf": float64(testNow.Add(time.Minute).Unix())}),
		"valid nbf":                sign(t, testSecret, jwt.MapClaims{"sub": "alice", "exp": exp, "nbf": float64(testNow.Add(-time.Minute).Unix())}),
		"wrong key":                sign(t, "another-key-another-key-another-k", jwt.MapClaims{"sub": "alice", "exp": exp}),
		"tampered payload":         parts[0] + "." + strings.Split(sign(t, testSecret, jwt.MapClaims{"sub": "mallory", "exp": exp}), ".")[1] + "." + parts[2],
		"truncated signature":      good[:len(good)-2],
		"extra segment":            good + ".x",
		"two segments":             parts[0] + "." + parts[1],
		"padded signature":         good + "=",
		"garbage payload":          canonical(testSecret, []byte("!!!")),
		"sub as number":            sign(t, testSecret, jwt.MapClaims{"sub": 42, "exp": exp}),
		"malformed iat":            sign(t, testSecret, jwt.MapClaims{"sub": "alice", "exp": exp, "iat": "yesterday"}),
		"numeric aud":              sign(t, testSecret, jwt.MapClaims{"sub": "alice", "exp": exp, "aud": 7}),
		"numeric iss":              sign(t, testSecret, jwt.MapClaims{"sub": "alice", "exp": exp, "iss": 7}),
		"numeric jti":              sign(t, testSecret, jwt.MapClaims{"sub": "alice", "exp": exp, "jti": 7}),
		"numeric-string exp":       canonical(testSecret, []byte(`{"sub":"alice","exp":"`+jsonNumber(exp)+`"}`)),
		"numeric-string nbf":       canonical(testSecret, []byte(`{"sub":"alice","exp":`+jsonNumber(exp)+`,"nbf":"1700000000"}`)),
		"nbf overflowing":          canonical(testSecret, []byte(`{"sub":"alice","exp":`+jsonNumber(exp)+`,"nbf":1e300}`)),
		"exp overflowing":          canonical(testSecret, []byte(`{"sub":"alice","exp":1e300}`)),
		"exp in year 9999":         sign(t, testSecret, jwt.MapClaims{"sub": "alice", "exp": 253402300000.0}),
		"issued next year":         sign(t, testSecret, jwt.MapClaims{"sub": "alice", "exp": exp + 365*86400, "iat": float64(testNow.Add(365 * 24 * time.Hour).Unix())}),
		"lifetime of 2 days":       sign(t, testSecret, jwt.MapClaims{"sub": "alice", "exp": exp, "iat": float64(testNow.Add(-47 * time.Hour).Unix())}),
		"trailing data":            canonical(testSecret, []byte(`{"sub":"alice","exp":`+jsonNumber(exp)+`} x`)),
		"null claims":              canonical(testSecret, []byte(`null`)),
		"array claims":             canonical(testSecret, []byte(`[]`)),
		"duplicate sub, last wins": canonical(testSecret, []byte(`{"sub":"alice","sub":"bob","exp":`+jsonNumber(exp)+`}`)),
	}
	var accepted []string
	for name, tok := range tokens {
		t.Run(name, func(t *testing.T) {
			fastSub, fastErr, handled, sub, err := fastAndGeneral(a, tok)
			if !handled {
				return // not canonical: golang-jwt alone decides
			}
			require.Equal(t, err == nil, fastErr == nil, "golang-jwt: %v, fast path: %v", err, fastErr)
			require.Equal(t, sub, fastSub)
			if err == nil {
				accepted = append(accepted, name)
			}
		})
	}
	require.ElementsMatch(t, []string{"good", "valid nbf", "duplicate sub, last wins", "numeric-string exp", "numeric-string nbf"}, accepted)

	// Where our policy does not apply (no iss, aud, lifetime or range
	// question), golang-jwt's own claims type decides the same.
	plain := jwt.NewParser(jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired(), jwt.WithTimeFunc(func() time.Time { return testNow }))
	for _, name := range []string{"malformed iat", "numeric aud", "numeric iss", "numeric jti", "numeric-string exp", "numeric-string nbf", "good"} {
		_, refErr := plain.ParseWithClaims(tokens[name], &jwt.RegisteredClaims{}, func(*jwt.Token) (any, error) { return []byte(testSecret), nil })
		_, err := a.Verify(tokens[name])
		require.Equal(t, refErr == nil, err == nil, "%s: golang-jwt %v, ours %v", name, refErr, err)
	}
}

func jsonNumber(f float64) string { b, _ := json.Marshal(f); return string(b) }

// The policy, on either path: issuer, audience, lifetime, times out of
// range, crit, the previous secret, and keys by kid.
func TestTokenPolicy(t *testing.T) {
	exp := float64(testNow.Add(time.Hour).Unix())
	strict := testAuth(func(c *Config) { c.Issuer, c.Audience = "https://id.example", "flashsale" })
	ok := func(a *Verifier, tok string) {
		t.Helper()
		_, err := a.Verify(tok)
		require.NoError(t, err)
	}
	refused := func(a *Verifier, tok string) {
		t.Helper()
		_, err := a.Verify(tok)
		require.Error(t, err)
	}
	claims := func(more jwt.MapClaims) jwt.MapClaims {
		c := jwt.MapClaims{"sub": "alice", "exp": exp, "iss": "https://id.example", "aud": []string{"shop", "flashsale"}}
		for k, v := range more {
			c[k] = v
		}
		return c
	}
	ok(strict, sign(t, testSecret, claims(nil)))
	refused(strict, sign(t, testSecret, claims(jwt.MapClaims{"iss": "https://evil.example"})))
	refused(strict, sign(t, testSecret, claims(jwt.MapClaims{"aud": "another"})))
	refused(strict, sign(t, testSecret, jwt.MapClaims{"sub": "alice", "exp": exp}))
	ok(strict, sign(t, testSecret, claims(jwt.MapClaims{"aud": "flashsale"})))

	a := testAuth(func(c *Config) { c.PreviousSecret = "the-previous-secret-of-32-bytes!!" })
	ok(a, sign(t, "the-previous-secret-of-32-bytes!!", jwt.MapClaims{"sub": "alice", "exp": exp}))
	refused(testAuth(), sign(t, "the-previous-secret-of-32-bytes!!", jwt.MapClaims{"sub": "alice", "exp": exp}))
	refused(a, sign(t, testSecret, jwt.MapClaims{"sub": "alice", "exp": float64(testNow.Add(25 * time.Hour).Unix())}))
	// iat may be a minute ahead of the gateway's clock (skew), no more: an
	// iat in the future would stretch the lifetime bound (exp - iat) to
	// any exp, up to year 9999.
	ok(a, sign(t, testSecret, jwt.MapClaims{"sub": "alice", "exp": exp, "iat": float64(testNow.Add(30 * time.Second).Unix())}))
	refused(a, sign(t, testSecret, jwt.MapClaims{"sub": "alice", "exp": float64(testNow.Add(25 * time.Hour).Unix()), "iat": float64(testNow.Add(2 * time.Hour).Unix())}))
	const year9999 = 253402300000.0
	refused(a, sign(t, testSecret, jwt.MapClaims{"sub": "alice", "exp": year9999, "iat": year9999 - 3600}))

	// crit: not canonical, so the general path; refused even when signed.
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "alice", "exp": exp})
	tok.Header["crit"] = []string{"exp"}
	s, err := tok.SignedString([]byte(testSecret))
	require.NoError(t, err)
	refused(a, s)

	// Public keys from a key set, by kid and alg.
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	edPub, edKey, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	set := map[string]any{"keys": []map[string]string{
		{"kty": "RSA", "kid": "r1", "n": b64u(rsaKey.N.Bytes()), "e": b64u([]byte{1, 0, 1}), "alg": "RS256"},
		{"kty": "EC", "crv": "P-256", "kid": "e1", "x": b64u(ecKey.X.FillBytes(make([]byte, 32))), "y": b64u(ecKey.Y.FillBytes(make([]byte, 32)))},
		{"kty": "OKP", "crv": "Ed25519", "kid": "d1", "x": b64u(edPub)},
	}}
	raw, err := json.Marshal(set)
	require.NoError(t, err)
	keys, err := ParseKeySet(raw)
	require.NoError(t, err)
	idp := testAuth(func(c *Config) { c.Keys = keys; c.Secret = "" })
	signWith := func(m jwt.SigningMethod, kid string, key any) string {
		tok := jwt.NewWithClaims(m, jwt.MapClaims{"sub": "alice", "exp": exp})
		tok.Header["kid"] = kid
		s, err := tok.SignedString(key)
		require.NoError(t, err)
		return s
	}
	ok(idp, signWith(jwt.SigningMethodRS256, "r1", rsaKey))
	ok(idp, signWith(jwt.SigningMethodES256, "e1", ecKey))
	ok(idp, signWith(jwt.SigningMethodEdDSA, "d1", edKey))
	refused(idp, signWith(jwt.SigningMethodRS256, "unknown", rsaKey))
	refused(idp, signWith(jwt.SigningMethodRS256, "e1", rsaKey))        // kid of another alg
	refused(idp, signWith(jwt.SigningMethodES256, "e1", otherECKey(t))) // wrong key
	refused(idp, sign(t, testSecret, jwt.MapClaims{"sub": "alice", "exp": exp}))
}

func otherECKey(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return k
}

func b64u(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func TestBadKeySetsAreRefused(t *testing.T) {
	for name, set := range map[string]string{
		"not json":            `{`,
		"no keys":             `{"keys":[]}`,
		"no kid":              `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}`,
		"unknown kty":         `{"keys":[{"kty":"oct","kid":"a","k":"AAAA"}]}`,
		"short ed25519":       `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","x":"AAAA"}]}`,
		"point off the curve": `{"keys":[{"kty":"EC","crv":"P-256","kid":"a","x":"` + b64u(make([]byte, 32)) + `","y":"` + b64u(append(make([]byte, 31), 1)) + `"}]}`,
		"small rsa":           `{"keys":[{"kty":"RSA","kid":"a","n":"AQAB","e":"AQAB"}]}`,
		"alg mismatch":        `{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"a","alg":"RS256","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}`,
	} {
		_, err := ParseKeySet([]byte(set))
		require.Error(t, err, name)
	}
}

// FuzzFastPathAgreesWithGolangJWT signs any payload under the canonical
// header and checks that the fast path and golang-jwt accept and refuse it
// alike, with the same subject.
func FuzzFastPathAgreesWithGolangJWT(f *testing.F) {
	exp := jsonNumber(float64(testNow.Add(time.Hour).Unix()))
	for _, seed := range []string{
		`{"sub":"alice","exp":` + exp + `}`,
		`{"sub":"alice","exp":"` + exp + `"}`,
		`{"sub":"alice","exp":` + exp + `,"nbf":1e300}`,
		`{"sub":"alice","exp":` + exp + `,"iat":"x"}`,
		`{"sub":"alice","exp":` + exp + `,"aud":["a",1]}`,
		`{"sub":"alice","exp":` + exp + `,"aud":"flashsale","iss":"i"}`,
		`{"sub":1,"exp":` + exp + `}`,
		`{"exp":1.5e9}`, `null`, `[]`, `{}`, `{"exp":-1e20}`, `{"sub":"a","exp":` + exp + `,"exp":1}`,
	} {
		f.Add([]byte(seed), false)
		f.Add([]byte(seed), true)
	}
	plain, strict := testAuth(), testAuth(func(c *Config) { c.Issuer, c.Audience = "i", "flashsale" })
	f.Fuzz(func(t *testing.T, payload []byte, useStrict bool) {
		a := plain
		if useStrict {
			a = strict
		}
		fastSub, fastErr, handled, sub, err := fastAndGeneral(a, canonical(testSecret, payload))
		if !handled {
			t.Fatal("a canonical token must take the fast path")
		}
		if (err == nil) != (fastErr == nil) || sub != fastSub {
			t.Fatalf("payload %q: golang-jwt (%q, %v), fast path (%q, %v)", payload, sub, err, fastSub, fastErr)
		}
	})
}

// FuzzTokenVerifier feeds any string as a bearer token: no panic, and
// where the fast path takes it, golang-jwt agrees.
func FuzzTokenVerifier(f *testing.F) {
	a := testAuth()
	f.Add(sign(f, testSecret, jwt.MapClaims{"sub": "alice", "exp": float64(testNow.Add(time.Hour).Unix())}))
	f.Add(canonicalHS256Header + "..")
	f.Add("a.b.c")
	f.Add("")
	f.Fuzz(func(t *testing.T, tok string) {
		fastSub, fastErr, handled, sub, err := fastAndGeneral(a, tok)
		if handled && ((err == nil) != (fastErr == nil) || sub != fastSub) {
			t.Fatalf("token %q: golang-jwt (%q, %v), fast path (%q, %v)", tok, sub, err, fastSub, fastErr)
		}
	})
}
