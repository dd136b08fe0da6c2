package room

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
)

// Header carries a waiter's token on polls and claims. Without it the
// gateway looks the caller's place up in Redis; with it, not.
const Header = "X-Flashsale-Queue"

// Tokens signs and verifies waiters' tokens: "PLACE.MAC", the MAC over
// the voucher, the user and the place, so a token names one user's place
// in one room and cannot be moved to another user, room or place.
type Tokens struct{ key []byte }

// NewTokens returns Tokens keyed by key (every gateway must share it).
func NewTokens(key []byte) *Tokens {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("flashsale waiting room"))
	return &Tokens{key: mac.Sum(nil)}
}

// ErrBadToken: a token that is not one of ours for this user and voucher.
var ErrBadToken = errors.New("room: bad queue token")

const macLen = 16

// Sign is the token of user's place p in voucher v's room.
func (t *Tokens) Sign(v int64, user string, p Place) string {
	place := p.String()
	return place + "." + base64.RawURLEncoding.EncodeToString(t.mac(v, user, place))
}

// Verify returns the place tok names, if tok was signed for user in
// voucher v's room.
func (t *Tokens) Verify(v int64, user, tok string) (Place, error) {
	place, sig, ok := strings.Cut(tok, ".")
	if !ok || len(tok) > 64 {
		return Place{}, ErrBadToken
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, t.mac(v, user, place)) {
		return Place{}, ErrBadToken
	}
	p, err := ParsePlace(place)
	if err != nil {
		return Place{}, ErrBadToken
	}
	return p, nil
}

func (t *Tokens) mac(v int64, user, place string) []byte {
	m := hmac.New(sha256.New, t.key)
	var b [20]byte
	m.Write(strconv.AppendInt(b[:0], v, 10))
	m.Write([]byte{0})
	m.Write([]byte(user))
	m.Write([]byte{0})
	m.Write([]byte(place))
	return m.Sum(nil)[:macLen]
}
