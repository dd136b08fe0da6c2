package token

import (
	"bytes"
	"encoding/json"

	"github.com/golang-jwt/jwt/v5"
)

// decodeClaims decodes a token's claims into c, as json.Unmarshal would.
// The claims of the tokens identity providers issue for flashsale take a
// short way (simpleClaims), which was most of a token check's cost
// through encoding/json's reflection; any other payload takes
// json.Unmarshal itself.
func decodeClaims(body []byte, c *tokenClaims) error {
	if simpleClaims(body, c) {
		return nil
	}
	*c = tokenClaims{policy: c.policy}
	return json.Unmarshal(body, c)
}

// simpleClaims decodes body into c when body is an object whose keys and
// string values are ASCII without escapes, whose registered claims have
// the types RFC 7519 gives them (iss, sub, jti strings; aud a string or an
// array of strings; exp, nbf, iat numbers) and whose other claims are
// strings, numbers, true, false or null. It reports false, with c in any
// state, for anything else: a nested object, an escape, a null or a wrong
// type in a registered claim, a key that differs from a registered one
// only in case (encoding/json folds case), a value it would refuse, bad
// JSON. FuzzDecodeClaims holds it to json.Unmarshal wherever it reports
// true.
func simpleClaims(body []byte, c *tokenClaims) bool {
	d := claimsDecoder{b: body}
	if !d.byte('{') {
		return false
	}
	if d.byte('}') {
		return d.end()
	}
	for {
		key, ok := d.str()
		if !ok || !d.byte(':') {
			return false
		}
		switch string(key) {
		case "iss", "sub", "jti":
			v, ok := d.str()
			if !ok {
				return false
			}
			switch string(key) {
			case "iss":
				c.Issuer = string(v)
			case "sub":
				c.Subject = string(v)
			default:
				c.ID = string(v)
			}
		case "aud":
			aud, ok := d.audience()
			if !ok {
				return false
			}
			c.Audience = aud
		case "exp", "nbf", "iat":
			lit, ok := d.number()
			if !ok {
				return false
			}
			var t numericDate
			if t.fromNumber(json.Number(lit)) != nil {
				return false
			}
			switch string(key) {
			case "exp":
				c.ExpiresAt = &t
			case "nbf":
				c.NotBefore = &t
			default:
				c.IssuedAt = &t
			}
		default:
			for _, name := range [...]string{"iss", "sub", "aud", "exp", "nbf", "iat", "jti"} {
				if bytes.EqualFold(key, []byte(name)) {
					return false
				}
			}
			if !d.scalar() {
				return false
			}
		}
		if d.byte(',') {
			continue
		}
		return d.byte('}') && d.end()
	}
}

// claimsDecoder reads the subset of JSON simpleClaims takes.
type claimsDecoder struct {
	b []byte
	i int
}

func (d *claimsDecoder) space() {
	for d.i < len(d.b) && (d.b[d.i] == ' ' || d.b[d.i] == '\t' || d.b[d.i] == '\n' || d.b[d.i] == '\r') {
		d.i++
	}
}

// byte consumes c, after white space, if it is next.
func (d *claimsDecoder) byte(c byte) bool {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// end reports whether only white space is left.
func (d *claimsDecoder) end() bool {
	d.space()
	return d.i == len(d.b)
}

// str reads a string of ASCII without escapes, the bytes between its
// quotes.
func (d *claimsDecoder) str() ([]byte, bool) {
	if !d.byte('"') {
		return nil, false
	}
	start := d.i
	for ; d.i < len(d.b); d.i++ {
		switch c := d.b[d.i]; {
		case c == '"':
			d.i++
			return d.b[start : d.i-1], true
		case c < 0x20 || c == '\\' || c >= 0x80:
			return nil, false
		}
	}
	return nil, false
}

// audience reads aud as jwt.ClaimStrings decodes it: a string, or an
// array of strings (nil when empty).
func (d *claimsDecoder) audience() (jwt.ClaimStrings, bool) {
	d.space()
	if d.i < len(d.b) && d.b[d.i] == '"' {
		s, ok := d.str()
		return jwt.ClaimStrings{string(s)}, ok
	}
	if !d.byte('[') {
		return nil, false
	}
	var aud jwt.ClaimStrings
	if d.byte(']') {
		return aud, true
	}
	for {
		s, ok := d.str()
		if !ok {
			return nil, false
		}
		aud = append(aud, string(s))
		if d.byte(',') {
			continue
		}
		return aud, d.byte(']')
	}
}

// number reads a number literal as JSON's grammar has it:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (d *claimsDecoder) number() ([]byte, bool) {
	d.space()
	start := d.i
	digits := func() int {
		n := 0
		for d.i < len(d.b) && '0' <= d.b[d.i] && d.b[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	if d.i < len(d.b) && d.b[d.i] == '0' {
		d.i++
	} else if digits() == 0 {
		return nil, false
	}
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if digits() == 0 {
			return nil, false
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			return nil, false
		}
	}
	return d.b[start:d.i], true
}

// scalar skips a string, a number, true, false or null.
func (d *claimsDecoder) scalar() bool {
	d.space()
	if d.i == len(d.b) {
		return false
	}
	switch d.b[d.i] {
	case '"':
		_, ok := d.str()
		return ok
	case 't', 'f', 'n':
		for _, lit := range [...]string{"true", "false", "null"} {
			if len(d.b)-d.i >= len(lit) && string(d.b[d.i:d.i+len(lit)]) == lit {
				d.i += len(lit)
				return true
			}
		}
		return false
	}
	_, ok := d.number()
	return ok
}
