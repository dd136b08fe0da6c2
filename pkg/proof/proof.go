package proof

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	altcha "github.com/altcha-org/altcha-lib-go"
)

// Header carries a solution: ALTCHA's payload, base64 of its JSON.
const Header = "X-Flashsale-Proof"

// MaxHeaderBytes bounds a solution's header: a payload is ~300 bytes.
const MaxHeaderBytes = 2048

// Issuer issues and verifies challenges under one HMAC key.
type Issuer struct {
	key string
	ttl time.Duration
	now func() time.Time
}

// New returns an Issuer whose challenges live ttl, keyed with key, on the
// clock now.
func New(key []byte, ttl time.Duration, now func() time.Time) *Issuer {
	return &Issuer{key: string(key), ttl: ttl, now: now}
}

// Challenge is a challenge for user to spend on voucher, at difficulty
// maxNumber.
func (i *Issuer) Challenge(user string, voucher, maxNumber int64) (altcha.Challenge, error) {
	expires := i.now().Add(i.ttl)
	return altcha.CreateChallenge(altcha.ChallengeOptions{
		Algorithm: altcha.SHA256, MaxNumber: maxNumber, HMACKey: i.key, Expires: &expires,
		Params: url.Values{"user": {user}, "v": {strconv.FormatInt(voucher, 10)}, "max": {strconv.FormatInt(maxNumber, 10)}},
	})
}

// Proof is a verified solution.
type Proof struct {
	// ID names the challenge: its signature (hex), unique per challenge.
	ID string
	// Max is the challenge's difficulty.
	Max int64
	// TTL is how long its single use must be remembered: the challenge's
	// time left, rounded up to the second, plus UsedKeySlack.
	TTL time.Duration
}

// UsedKeySlack is what a proof's used-key lives beyond its challenge's
// expiry: Redis expires the key on its own clock, and gateways check the
// expiry on theirs, so clocks a few seconds apart must not let a proof
// be spent again in between.
const UsedKeySlack = 30 * time.Second

// ErrInvalid is a solution that is malformed, wrong, expired, another
// user's, or for another voucher.
var ErrInvalid = errors.New("invalid proof of work")

// Verify checks header, a solution, for user's claim (or join) of voucher.
func (i *Issuer) Verify(header, user string, voucher int64) (Proof, error) {
	if len(header) > MaxHeaderBytes {
		return Proof{}, fmt.Errorf("%w: longer than %d bytes", ErrInvalid, MaxHeaderBytes)
	}
	raw, err := base64.StdEncoding.DecodeString(header)
	if err != nil {
		return Proof{}, fmt.Errorf("%w: not base64", ErrInvalid)
	}
	var p altcha.Payload
	if err := json.Unmarshal(raw, &p); err != nil {
		return Proof{}, fmt.Errorf("%w: not an ALTCHA payload", ErrInvalid)
	}
	if p.Algorithm != string(altcha.SHA256) {
		return Proof{}, fmt.Errorf("%w: algorithm %q", ErrInvalid, p.Algorithm)
	}
	params := altcha.ExtractParams(p)
	expires, errE := strconv.ParseInt(params.Get("expires"), 10, 64)
	maxNumber, errM := strconv.ParseInt(params.Get("max"), 10, 64)
	switch {
	case errE != nil || errM != nil || maxNumber < 1 || p.Number < 0 || p.Number > maxNumber:
		return Proof{}, fmt.Errorf("%w: malformed", ErrInvalid)
	case params.Get("user") != user:
		return Proof{}, fmt.Errorf("%w: issued to another user", ErrInvalid)
	case params.Get("v") != strconv.FormatInt(voucher, 10):
		return Proof{}, fmt.Errorf("%w: issued for another voucher", ErrInvalid)
	}
	left := time.Unix(expires, 0).Sub(i.now())
	if left <= 0 {
		return Proof{}, fmt.Errorf("%w: expired", ErrInvalid)
	}
	left = (left + time.Second - 1).Truncate(time.Second) + UsedKeySlack
	ok, err := altcha.VerifySolutionSafe(p, i.key, false)
	if err != nil || !ok {
		return Proof{}, fmt.Errorf("%w: wrong solution or signature", ErrInvalid)
	}
	return Proof{ID: p.Signature, Max: maxNumber, TTL: left}, nil
}

// Solve finds the solution of c by brute force, as a client does, and
// returns it as the header carries it (tests and benchmarks).
func Solve(c altcha.Challenge) (string, error) {
	sol, err := altcha.SolveChallenge(c.Challenge, c.Salt, altcha.Algorithm(c.Algorithm), int(c.MaxNumber), 0, nil)
	if err != nil || sol == nil {
		return "", fmt.Errorf("no solution up to %d: %v", c.MaxNumber, err)
	}
	b, err := json.Marshal(altcha.Payload{Algorithm: c.Algorithm, Challenge: c.Challenge, Number: int64(sol.Number),
		Salt: c.Salt, Signature: c.Signature})
	return base64.StdEncoding.EncodeToString(b), err
}
