package token

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
)

// jwk is one public key of an identity provider's key set (RFC 7517),
// usable for one signing algorithm.
type jwk struct {
	alg string // RS256, ES256 or EdDSA
	key any    // *rsa.PublicKey, *ecdsa.PublicKey or ed25519.PublicKey
}

// KeySet is an identity provider's public keys by kid.
type KeySet map[string]jwk

// LoadKeySet reads a JSON Web Key Set file ({"keys": [...]}) of RSA (RS256),
// P-256 (ES256) and Ed25519 (EdDSA) public keys, each with a distinct kid.
func LoadKeySet(path string) (KeySet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseKeySet(b)
}

// ParseKeySet is LoadKeySet of a file's content.
func ParseKeySet(b []byte) (KeySet, error) {
	var set struct {
		Keys []struct {
			Kty, Kid, Alg, Use, Crv, N, E, X, Y string
		} `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("not a JSON Web Key Set: %w", err)
	}
	if len(set.Keys) == 0 {
		return nil, errors.New("the key set holds no key")
	}
	out := make(map[string]jwk, len(set.Keys))
	for i, k := range set.Keys {
		if k.Kid == "" {
			return nil, fmt.Errorf("key %d has no kid", i)
		}
		if _, dup := out[k.Kid]; dup {
			return nil, fmt.Errorf("kid %q appears twice", k.Kid)
		}
		if k.Use != "" && k.Use != "sig" {
			return nil, fmt.Errorf("key %q: use %q, not sig", k.Kid, k.Use)
		}
		var j jwk
		var err error
		switch {
		case k.Kty == "RSA":
			j.alg = "RS256"
			j.key, err = rsaKey(k.N, k.E)
		case k.Kty == "EC" && k.Crv == "P-256":
			j.alg = "ES256"
			j.key, err = ecKey(k.X, k.Y)
		case k.Kty == "OKP" && k.Crv == "Ed25519":
			j.alg = "EdDSA"
			var x []byte
			if x, err = b64(k.X); err == nil && len(x) != ed25519.PublicKeySize {
				err = errors.New("x is not an Ed25519 public key")
			}
			j.key = ed25519.PublicKey(x)
		default:
			return nil, fmt.Errorf("key %q: kty %q crv %q is not supported (RSA, EC P-256, OKP Ed25519)", k.Kid, k.Kty, k.Crv)
		}
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", k.Kid, err)
		}
		if k.Alg != "" && k.Alg != j.alg {
			return nil, fmt.Errorf("key %q: alg %q does not fit a %s key (%s)", k.Kid, k.Alg, k.Kty, j.alg)
		}
		out[k.Kid] = j
	}
	return out, nil
}

func b64(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }

func rsaKey(n, e string) (*rsa.PublicKey, error) {
	nb, err1 := b64(n)
	eb, err2 := b64(e)
	if err1 != nil || err2 != nil || len(nb) < 256 || len(eb) == 0 || len(eb) > 4 {
		return nil, errors.New("n and e must be base64url, n at least 2048 bits")
	}
	exp := new(big.Int).SetBytes(eb).Int64()
	if exp < 3 || exp%2 == 0 {
		return nil, errors.New("e must be odd and at least 3")
	}
	return &rsa.PublicKey{N: new(big.Int).SetBytes(nb), E: int(exp)}, nil
}

func ecKey(x, y string) (*ecdsa.PublicKey, error) {
	xb, err1 := b64(x)
	yb, err2 := b64(y)
	if err1 != nil || err2 != nil || len(xb) != 32 || len(yb) != 32 {
		return nil, errors.New("x and y must be 32 bytes of base64url")
	}
	// The uncompressed point, checked to be on the curve.
	k, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append([]byte{4}, append(xb, yb...)...))
	if err != nil {
		return nil, fmt.Errorf("not a P-256 point: %w", err)
	}
	return k, nil
}
