// Package claimid makes and reads the ids of claims answered
// outcome_unknown (pkg/gateway's outcome.go): what a buyer asks
// GET /v1/vouchers/{id}/claims/{claim_id} about.
//
// An id is "MS.HORIZON.SERIAL.MAC" or "MS.HORIZON.SERIAL.MAC.KEY": the
// claim's time (unix ms, the created_ms of the order it made, if any),
// its horizon (unix ms), its serial (hex), a MAC (HMAC-SHA256, truncated
// to 32 hex digits) of the voucher, the user and those, and the claim's
// Idempotency-Key if it had one. A gateway before serials gave
// "MS.MAC[.KEY]", still read: its claims had no horizon in Redis, and
// one is taken the outcome timeout after MS. Only the gateways make
// ids: one whose MAC is not the asker's and voucher's is no claim of
// theirs, told without a store.
package claimid

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
)

var (
	// ErrMalformed is an id that is no claim id's form.
	ErrMalformed = errors.New("not a claim id")
	// ErrNotYours is an id whose MAC is not the asker's and voucher's.
	ErrNotYours = errors.New("no claim of this user's and voucher's")
)

// macLen is a MAC's length in hex digits.
const macLen = 32

// Signer makes and reads claim ids with its key.
type Signer struct {
	key []byte
	// outcome is FLASHSALE_CLAIM_OUTCOME_TIMEOUT: an id before serials
	// had its claim's horizon that long after its time.
	outcome time.Duration
}

// New is a Signer of key, for a gateway that listens for a claim's reply
// for outcome.
func New(key []byte, outcome time.Duration) *Signer {
	return &Signer{key: key, outcome: outcome}
}

func (s *Signer) mac(ref admission.ClaimRef) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(strconv.FormatInt(ref.VoucherID, 10) + "\x00" + ref.UserID + "\x00" + strconv.FormatInt(ref.MS, 10) + "\x00" + ref.Key))
	if ref.Serial != 0 {
		m.Write([]byte("\x00" + strconv.FormatInt(ref.Horizon, 10) + "\x00" + strconv.FormatUint(ref.Serial, 16)))
	}
	return hex.EncodeToString(m.Sum(nil))[:macLen]
}

// ID is the id of the claim ref.
func (s *Signer) ID(ref admission.ClaimRef) string {
	id := strconv.FormatInt(ref.MS, 10) + "."
	if ref.Serial != 0 {
		id += strconv.FormatInt(ref.Horizon, 10) + "." + strconv.FormatUint(ref.Serial, 16) + "."
	}
	id += s.mac(ref)
	if ref.Key != "" {
		id += "." + ref.Key
	}
	return id
}

// Parse reads id as a claim of user and voucher: ErrMalformed when it
// is no claim id's form, ErrNotYours when its MAC is not theirs.
func (s *Signer) Parse(id, user string, voucher int64) (admission.ClaimRef, error) {
	ref := admission.ClaimRef{VoucherID: voucher, UserID: user}
	parts := strings.SplitN(id, ".", 3)
	if len(parts) < 2 {
		return ref, ErrMalformed
	}
	ms, ok := unixMS(parts[0])
	if !ok {
		return ref, ErrMalformed
	}
	ref.MS, ref.Horizon = ms, ms+s.outcome.Milliseconds()
	if len(parts[1]) != macLen { // MS.HORIZON.SERIAL.MAC[.KEY]
		if parts = strings.SplitN(id, ".", 5); len(parts) < 4 {
			return ref, ErrMalformed
		}
		serial, err := strconv.ParseUint(parts[2], 16, 64)
		if ref.Horizon, ok = unixMS(parts[1]); !ok || err != nil || serial == 0 || strconv.FormatUint(serial, 16) != parts[2] {
			return ref, ErrMalformed
		}
		ref.Serial = serial
		parts = parts[3:]
	} else {
		parts = parts[1:]
	}
	if _, err := hex.DecodeString(parts[0]); err != nil || len(parts[0]) != macLen {
		return ref, ErrMalformed
	}
	if len(parts) == 2 {
		if !httpapi.ValidUser(parts[1]) {
			return ref, ErrMalformed
		}
		ref.Key = parts[1]
	}
	if !hmac.Equal([]byte(parts[0]), []byte(s.mac(ref))) {
		return ref, ErrNotYours
	}
	return ref, nil
}

// unixMS reads a time of an id: unix ms, 1 to 15 digits, no sign.
func unixMS(s string) (int64, bool) {
	if len(s) == 0 || len(s) > 15 || s[0] < '0' || s[0] > '9' {
		return 0, false
	}
	ms, err := strconv.ParseInt(s, 10, 64)
	return ms, err == nil && ms > 0
}
