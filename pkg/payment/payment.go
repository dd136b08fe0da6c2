// Package payment is the payment webhook's signature: the sender signs the
// body with a shared secret and the time it sent it (Stripe's convention),
// and the receiver checks both, so a forged request fails and a captured
// one stops being good within minutes. It does no I/O.
package payment

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Header carries a signature: t=<unix seconds>,sha256=<hex HMAC-SHA256 of
// "<t>.<raw body>">, keyed with FLASHSALE_PAYMENT_WEBHOOK_SECRET.
const Header = "X-Flashsale-Signature"

// Errors of Verify.
var (
	ErrBadSignature = errors.New("payment webhook: the signature is missing, malformed or wrong")
	ErrStale        = errors.New("payment webhook: the signature's time is too far from now")
)

// Verifier checks signatures under Secret.
type Verifier struct {
	Secret string
	// Tolerance is how far a signature's time may be from now, either way.
	Tolerance time.Duration
	// Legacy accepts the old form, sha256= of the body alone, with no time
	// (FLASHSALE_PAYMENT_WEBHOOK_LEGACY), for a provider's migration.
	Legacy bool
}

// Verify checks header, the signature of body, at now. Several sha256=
// values may be sent (a secret rollover at the provider): one must match.
// legacy reports a signature of the old form, accepted because Legacy is
// on (the caller counts them, so an operator knows when to turn it off).
func (v Verifier) Verify(header string, body []byte, now time.Time) (legacy bool, err error) {
	var ts string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		switch {
		case !ok:
			return false, ErrBadSignature
		case k == "t":
			ts = val
		case k == "sha256":
			sigs = append(sigs, val)
		}
	}
	if len(sigs) == 0 {
		return false, ErrBadSignature
	}
	if ts == "" {
		if !v.Legacy || len(sigs) != 1 || !matches(sigs[0], v.Secret, body) {
			return false, ErrBadSignature
		}
		return true, nil
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sec <= 0 {
		return false, ErrBadSignature
	}
	signed := make([]byte, 0, len(ts)+1+len(body))
	signed = append(append(append(signed, ts...), '.'), body...)
	match := false
	for _, s := range sigs {
		match = match || matches(s, v.Secret, signed)
	}
	if !match {
		return false, ErrBadSignature
	}
	if d := now.Sub(time.Unix(sec, 0)); d > v.Tolerance || d < -v.Tolerance {
		return false, ErrStale
	}
	return false, nil
}

// matches reports whether hexSig is the HMAC-SHA256 of msg under secret.
func matches(hexSig, secret string, msg []byte) bool {
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(msg)
	return hmac.Equal(got, mac.Sum(nil))
}

// Sign is the Header value of body under secret at t, for a payment
// provider's integration (and tests).
func Sign(body []byte, secret string, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	return "t=" + ts + ",sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// SignLegacy is the old signature over the body alone ("sha256=<hex>").
func SignLegacy(body []byte, secret string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}
