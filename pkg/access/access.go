package access

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"strconv"
	"sync"
)

// Header carries a claim's or a room join's code.
const Header = "X-Flashsale-Access"

// codeBytes of the HMAC make a code: 120 bits, 20 characters of
// base64url.
const codeBytes = 15

// CodeLen is the length of a code.
var CodeLen = base64.RawURLEncoding.EncodedLen(codeBytes)

// Codes makes and checks the codes of one key. Safe for concurrent use.
type Codes struct {
	macs sync.Pool // of hash.Hash: an HMAC under the key, reset after use
}

// New returns the codes of key.
func New(key []byte) *Codes {
	k := append([]byte(nil), key...)
	return &Codes{macs: sync.Pool{New: func() any { return hmac.New(sha256.New, k) }}}
}

// sum writes the MAC of (voucher, user) into out.
func (c *Codes) sum(out *[sha256.Size]byte, voucher int64, user string) {
	m := c.macs.Get().(hash.Hash)
	var buf [64 + 24]byte
	b := strconv.AppendInt(buf[:0], voucher, 10)
	b = append(b, 0)
	m.Write(b)
	m.Write([]byte(user)) // does not escape: no copy
	m.Sum(out[:0])
	m.Reset()
	c.macs.Put(m)
}

// Code is user's code for voucher.
func (c *Codes) Code(voucher int64, user string) string {
	var mac [sha256.Size]byte
	c.sum(&mac, voucher, user)
	return base64.RawURLEncoding.EncodeToString(mac[:codeBytes])
}

// AppendCode appends user's code for voucher to b (for writing many).
func (c *Codes) AppendCode(b []byte, voucher int64, user string) []byte {
	var mac [sha256.Size]byte
	c.sum(&mac, voucher, user)
	return base64.RawURLEncoding.AppendEncode(b, mac[:codeBytes])
}

// Valid reports whether code is user's code for voucher.
func (c *Codes) Valid(code string, voucher int64, user string) bool {
	if len(code) != CodeLen {
		return false
	}
	var got [codeBytes]byte
	if n, err := base64.RawURLEncoding.Decode(got[:], []byte(code)); err != nil || n != codeBytes {
		return false
	}
	var mac [sha256.Size]byte
	c.sum(&mac, voucher, user)
	return hmac.Equal(got[:], mac[:codeBytes])
}
