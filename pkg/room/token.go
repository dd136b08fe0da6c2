package room

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"hash"
	"strconv"
	"strings"
	"sync"
)

// Header carries a waiter's token on polls and claims. A poll with it
// needs nothing else (the token names its user); without it the gateway
// looks the caller's place up in Redis.
const Header = "X-Flashsale-Queue"

// Tokens signs and verifies waiters' tokens: "PLACE.USER.MAC" (USER
// base64url), the MAC over the voucher, the user and the place, so a
// token names one user's place in one room and cannot be moved to another
// user, room or place. It is a capability, like a session cookie: whoever
// holds it may ask where that place stands.
type Tokens struct{ macs sync.Pool } // *macState

// macState is a keyed HMAC and the scratch space of one verification,
// pooled: a poll verifies a token without allocating for it.
type macState struct {
	h   hash.Hash
	buf []byte
}

// NewTokens returns Tokens keyed by key (every gateway must share it).
func NewTokens(key []byte) *Tokens {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("flashsale waiting room"))
	k := mac.Sum(nil)
	return &Tokens{macs: sync.Pool{New: func() any {
		return &macState{h: hmac.New(sha256.New, k), buf: make([]byte, 0, 2*MaxTokenLen+8)}
	}}}
}

// ErrBadToken is the error of a token that is not one of ours for this user and voucher.
var ErrBadToken = errors.New("room: bad queue token")

// MaxTokenLen bounds a token (a user id of up to 128 bytes).
const MaxTokenLen = 256

const macLen = 16

// Sign is the token of user's place p in voucher v's room.
func (t *Tokens) Sign(v int64, user string, p Place) string {
	place := p.String()
	var sum [sha256.Size]byte
	return place + "." + base64.RawURLEncoding.EncodeToString([]byte(user)) + "." +
		base64.RawURLEncoding.EncodeToString(t.mac(sum[:0], v, user, place))
}

// Verify returns the place tok names, if tok was signed for user in
// voucher v's room.
func (t *Tokens) Verify(v int64, user, tok string) (Place, error) {
	u, p, err := t.Open(v, tok)
	if err != nil || u != user {
		return Place{}, ErrBadToken
	}
	return p, nil
}

// Open returns the user and the place tok names, if it was signed for
// voucher v's room.
func (t *Tokens) Open(v int64, tok string) (string, Place, error) {
	if len(tok) > MaxTokenLen {
		return "", Place{}, ErrBadToken
	}
	place, rest, ok1 := strings.Cut(tok, ".")
	user64, sig, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 {
		return "", Place{}, ErrBadToken
	}
	if base64.RawURLEncoding.DecodedLen(len(sig)) != macLen {
		return "", Place{}, ErrBadToken
	}
	m := t.macs.Get().(*macState)
	defer t.macs.Put(m)
	// buf: the encoded user and MAC, then the user decoded.
	enc := append(m.buf[:0], user64...)
	enc = append(enc, sig...)
	dec := enc[len(enc):cap(enc)]
	n, err := base64.RawURLEncoding.Decode(dec, enc[:len(user64)])
	if err != nil || n == 0 {
		return "", Place{}, ErrBadToken
	}
	var got [macLen]byte
	if _, err := base64.RawURLEncoding.Decode(got[:], enc[len(user64):]); err != nil {
		return "", Place{}, ErrBadToken
	}
	user := string(dec[:n])
	var sum [sha256.Size]byte
	if !hmac.Equal(got[:], m.sum(sum[:0], v, user, place)) {
		return "", Place{}, ErrBadToken
	}
	p, err := ParsePlace(place)
	if err != nil {
		return "", Place{}, ErrBadToken
	}
	return user, p, nil
}

// mac appends the first macLen bytes of the MAC of (v, user, place) to b.
func (t *Tokens) mac(b []byte, v int64, user, place string) []byte {
	m := t.macs.Get().(*macState)
	defer t.macs.Put(m)
	return m.sum(b, v, user, place)
}

// sum is mac with m (its buf the message's scratch).
func (m *macState) sum(b []byte, v int64, user, place string) []byte {
	m.h.Reset()
	msg := strconv.AppendInt(m.buf[:0], v, 10)
	msg = append(msg, 0)
	msg = append(msg, user...)
	msg = append(msg, 0)
	msg = append(msg, place...)
	m.h.Write(msg)
	return m.h.Sum(b)[:len(b)+macLen]
}
