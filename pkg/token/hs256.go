package token

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"strings"
	"sync"
)

// canonicalHS256Header is base64url({"alg":"HS256","typ":"JWT"}), the header
// every common HS256 signer writes. Tokens with exactly this header are
// verified by hs256 below without golang-jwt's generic decoding (a map for
// the header, reflection over RegisteredClaims), which was the largest
// share of a claim's CPU in the gateway's profile. Any other header goes
// through golang-jwt unchanged.
const canonicalHS256Header = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"

// hs256 verifies the signature of canonical HS256 tokens, with the
// current secret or the previous one, and decodes their claims as
// golang-jwt would; Verifier.Verify then runs the same validator on them.
type hs256 struct {
	macs []*sync.Pool // per secret: hash.Hash, HMAC-SHA256 keyed with it
}

func newHS256(secrets [][]byte) *hs256 {
	h := &hs256{}
	for _, s := range secrets {
		h.macs = append(h.macs, &sync.Pool{New: func() any { return hmac.New(sha256.New, s) }})
	}
	return h
}

// verify reports whether raw has the canonical header (handled=false: use
// the general parser) and, if so, its claims or an error. The claims are
// decoded only once the signature holds.
func (h *hs256) verify(raw string, policy *tokenPolicy) (c *tokenClaims, handled bool, err error) {
	header, rest, found := strings.Cut(raw, ".")
	if !found || header != canonicalHS256Header {
		return nil, false, nil
	}
	payload, sig, found := strings.Cut(rest, ".")
	if !found || strings.IndexByte(sig, '.') >= 0 {
		return nil, true, ErrInvalid
	}
	var want [sha256.Size]byte
	if base64.RawURLEncoding.DecodedLen(len(sig)) != len(want) {
		return nil, true, ErrInvalid
	}
	if _, err := base64.RawURLEncoding.Decode(want[:], []byte(sig)); err != nil {
		return nil, true, ErrInvalid
	}
	signed := []byte(raw[:len(header)+1+len(payload)])
	ok := false
	for _, pool := range h.macs {
		mac := pool.Get().(hash.Hash)
		mac.Reset()
		mac.Write(signed)
		var got [sha256.Size]byte
		mac.Sum(got[:0])
		pool.Put(mac)
		if hmac.Equal(got[:], want[:]) {
			ok = true
			break
		}
	}
	if !ok {
		return nil, true, ErrInvalid
	}
	body := make([]byte, base64.RawURLEncoding.DecodedLen(len(payload)))
	n, err := base64.RawURLEncoding.Decode(body, []byte(payload))
	if err != nil {
		return nil, true, ErrInvalid
	}
	c = &tokenClaims{policy: policy}
	if err := decodeClaims(body[:n], c); err != nil {
		return nil, true, ErrInvalid
	}
	return c, true, nil
}
