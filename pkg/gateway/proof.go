package gateway

// The proof-of-work gate's HTTP side: challenges to solve (pkg/proof) and
// a claim's proof, verified here and used once by the admission script.

import (
	"crypto/hmac"
	"crypto/sha256"
	"net/http"

	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/proof"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// powKey is FLASHSALE_POW_KEY, or one derived from the admin token.
func (c *Config) powKey() []byte { return c.keyOr(c.PowKey, "flashsale proof-of-work key") }

// keyOr is key, or, when it is unset, one derived one-way from the admin
// token for purpose: a key the operator need not make, which tells
// nothing of the token.
func (c *Config) keyOr(key, purpose string) []byte {
	if key != "" {
		return []byte(key)
	}
	mac := hmac.New(sha256.New, []byte(c.AdminToken))
	mac.Write([]byte(purpose))
	return mac.Sum(nil)
}

var (
	errProofRequired = httpapi.NewError(http.StatusForbidden, "proof_required",
		"this voucher needs a proof of work: solve a challenge of GET /v1/challenge?voucher_id=… and send it in "+proof.Header)
	errProofInvalid = httpapi.NewError(http.StatusForbidden, "proof_invalid",
		"the proof of work is wrong, expired, another user's, for another voucher, too easy for this voucher, or used before: solve a new challenge")
)

// getChallenge: GET /v1/challenge?voucher_id=ID, a challenge for the
// caller to spend on that voucher, at its difficulty
// (FLASHSALE_POW_MAX_NUMBER for a voucher without a gate, so that a gate
// switched on later meets a proof at least that hard), in ALTCHA's format.
func (g *Gateway) getChallenge(w http.ResponseWriter, r *http.Request) {
	user, ok := g.user(w, r)
	if !ok {
		return
	}
	v, err := httpapi.VoucherParam(r)
	if err == nil && v == 0 {
		err = errChallengeVoucher
	}
	if err != nil {
		g.fail(w, r, err)
		return
	}
	difficulty := g.cfg.PowMaxNumber
	n, err := g.redis.ProofOfWork(r.Context(), v)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	if n > 0 {
		difficulty = n
	}
	c, err := g.pow.Challenge(user, v, difficulty)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, c)
}

var errChallengeVoucher = httpapi.BadRequest("invalid_field", "voucher_id is required: a challenge is spent on the voucher it names, once")

// claimProof verifies the proof of work of user's claim (or join) of
// voucher, if it carries one.
func (g *Gateway) claimProof(r *http.Request, user string, voucher int64) (rdb.Proof, error) {
	h := httpapi.HeaderValue(r, proof.Header)
	if h == "" {
		return rdb.Proof{}, nil
	}
	p, err := g.pow.Verify(h, user, voucher)
	if err != nil {
		return rdb.Proof{}, errProofInvalid
	}
	return rdb.Proof{ID: p.ID, Max: p.Max, TTL: p.TTL}, nil
}
