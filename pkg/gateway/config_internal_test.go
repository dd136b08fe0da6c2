package gateway

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/stretchr/testify/require"
)

// The binary validates its configuration once (app.Main: SetDefaults, then
// Validate) and New uses what Validate parsed: the key set is read once,
// so New works even once the file is gone; a Config nobody validated is
// validated by New.
func TestConfigIsValidatedOnceAndTheKeySetReadOnce(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "jwks.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","kid":"k1","x":"`+
		base64.RawURLEncoding.EncodeToString(pub)+`"}]}`), 0o600))
	cfg := Config{AdminToken: "admin-token-admin-token-admin-token", JWTJWKSFile: path}
	cfg.SetDefaults()
	require.NoError(t, cfg.Validate())
	require.NoError(t, os.Remove(path))
	g, err := New(cfg, nil, nil, nil)
	require.NoError(t, err, "New did not read the key set again")
	t.Cleanup(g.Close)
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()})
	tok.Header["kid"] = "k1"
	signed, err := tok.SignedString(priv)
	require.NoError(t, err)
	sub, err := g.auth.users.Verify(signed)
	require.NoError(t, err, "the key set Validate read verifies the provider's tokens")
	require.Equal(t, "alice", sub)

	_, err = New(Config{AdminToken: cfg.AdminToken, JWTJWKSFile: path}, nil, nil, nil)
	require.ErrorContains(t, err, "FLASHSALE_JWT_JWKS_FILE", "not validated before: New validates, and reads the file")
}

// FLASHSALE_QUEUE_EMBED_ORIGINS takes exact origins only: a wildcard
// would be written into the page's frame-ancestors, where it means any
// subdomain.
func TestEmbedOriginsAreExactOrigins(t *testing.T) {
	good := []string{"https://shop.example", "http://localhost:8080", "https://127.0.0.1", "https://[::1]:8443", "https://xn--bcher-kva.example"}
	require.Empty(t, badOrigin(good))
	for _, bad := range []string{"https://*.example", "*", "https://shop.example/", "https://shop.example/buy", "shop.example",
		"https://shop.example:", "https://shop.example:0", "https://shop.example:99999", "https://shop.example:08080",
		"https://user@shop.example", "https://shop.example?x", "https://shop.example#x", "https://shop..example",
		"https://-shop.example", "https://shop_example.com", "ftp://shop.example", "'self'", "https://shop.example 'unsafe-inline'",
		"https://shop.example;", "HTTPS://shop.example", ""} {
		require.Equal(t, bad, badOrigin([]string{"https://shop.example", bad}), "%q", bad)
	}
}
