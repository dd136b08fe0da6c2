package gateway_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	altcha "github.com/altcha-org/altcha-lib-go"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/proof"
)

// solve asks the gateway for a challenge as user (for voucher, if set)
// and solves it, as a client would.
func (f *fixture) solve(user, voucher string) (string, altcha.Challenge) {
	f.t.Helper()
	path := "/v1/challenge"
	if voucher != "" {
		path += "?voucher_id=" + voucher
	}
	res := f.do("GET", path, f.token(user), "")
	require.Equal(f.t, http.StatusOK, res.Status, res.Raw)
	var c altcha.Challenge
	require.NoError(f.t, json.Unmarshal([]byte(res.Raw), &c))
	sol, err := proof.Solve(c)
	require.NoError(f.t, err)
	return sol, c
}

// A voucher with a gate takes a claim only with a solved challenge of its
// difficulty, the claimant's own, unexpired, once; a voucher without one
// asks for nothing, and a bad proof is refused anywhere.
func TestAProofOfWorkGate(t *testing.T) {
	f := newFixture(t)
	requireError(t, f.do("POST", "/admin/v1/vouchers", admin, `{"name":"x","stock":5,"proof_of_work":{"max_number":0}}`), http.StatusBadRequest, "invalid_field")
	requireError(t, f.do("POST", "/admin/v1/vouchers", admin, `{"name":"x","stock":5,"proof_of_work":{"max_number":20000000}}`), http.StatusBadRequest, "invalid_field")
	gated := f.do("POST", "/admin/v1/vouchers", admin, `{"name":"gated","stock":5,"per_user_limit":3,"proof_of_work":{"max_number":3000}}`)
	require.Equal(t, http.StatusCreated, gated.Status, gated.Raw)
	require.Equal(t, map[string]any{"max_number": 3000.0}, gated.Body["proof_of_work"])
	id := gated.Body["id"].(string)
	open := f.createVoucher(`{"name":"open","stock":5}`)
	require.Nil(t, f.do("GET", "/admin/v1/vouchers/"+open, admin, "").Body["proof_of_work"])
	claim := func(voucher, user, sol string) response {
		if sol == "" {
			return f.do("POST", "/v1/vouchers/"+voucher+"/orders", f.token(user), "")
		}
		return f.do("POST", "/v1/vouchers/"+voucher+"/orders", f.token(user), "", proof.Header, sol)
	}

	requireError(t, claim(id, "alice", ""), http.StatusForbidden, "proof_required")
	sol, c := f.solve("alice", id)
	require.EqualValues(t, 3000, c.MaxNumber, "the voucher's difficulty")
	require.Equal(t, http.StatusAccepted, claim(id, "alice", sol).Status)
	requireError(t, claim(id, "alice", sol), http.StatusForbidden, "proof_invalid") // used
	requireError(t, claim(id, "bob", sol), http.StatusForbidden, "proof_invalid")   // alice's
	// A challenge names its voucher: asked for none, it is refused; solved
	// for one voucher, it is spent on no other (a proof solved ahead of
	// time must not open every gated voucher).
	requireError(t, f.do("GET", "/v1/challenge", f.token("bob"), ""), http.StatusBadRequest, "invalid_field")
	hard := f.createVoucher(`{"name":"hard","stock":5}`)
	easy, c := f.solve("bob", hard)
	require.EqualValues(t, gateway.PowMaxNumberDefault, c.MaxNumber, "the default difficulty, for a voucher without a gate")
	forID, _ := f.solve("bob", id)
	requireError(t, claim(hard, "bob", forID), http.StatusForbidden, "proof_invalid")
	require.Equal(t, http.StatusAccepted, claim(id, "bob", forID).Status)
	// A gate switched on later, harder than the challenge: refused.
	require.Equal(t, http.StatusOK, f.do("PATCH", "/admin/v1/vouchers/"+hard, admin, `{"proof_of_work":{"max_number":60000}}`).Status)
	requireError(t, claim(hard, "bob", easy), http.StatusForbidden, "proof_invalid")

	// Expired: the gateway's clock moves past the challenge's life.
	late, _ := f.solve("carol", id)
	f.clock.Add(3 * time.Minute)
	requireError(t, claim(id, "carol", late), http.StatusForbidden, "proof_invalid")

	// No gate: no proof needed; a malformed one is refused all the same.
	require.Equal(t, http.StatusAccepted, claim(open, "dave", "").Status)
	requireError(t, claim(open, "erin", "not-a-proof"), http.StatusForbidden, "proof_invalid")
	requireError(t, f.do("GET", "/v1/challenge?voucher_id=x", f.token("a"), ""), http.StatusBadRequest, "invalid_field")

	// An operator puts a gate on a voucher on sale, and takes it off.
	for _, bad := range []string{`{"proof_of_work":{"max_number":0}}`, `{"proof_of_work":{"max":5}}`, `{"proof_of_work":7}`} {
		requireError(t, f.do("PATCH", "/admin/v1/vouchers/"+open, admin, bad), http.StatusBadRequest, "invalid_field")
	}
	on := f.do("PATCH", "/admin/v1/vouchers/"+open, admin, `{"proof_of_work":{"max_number":200}}`)
	require.Equal(t, http.StatusOK, on.Status, on.Raw)
	require.Equal(t, map[string]any{"max_number": 200.0}, on.Body["proof_of_work"])
	requireError(t, claim(open, "frank", ""), http.StatusForbidden, "proof_required")
	frank, c := f.solve("frank", open)
	require.EqualValues(t, 200, c.MaxNumber)
	require.Equal(t, http.StatusAccepted, claim(open, "frank", frank).Status)
	off := f.do("PATCH", "/admin/v1/vouchers/"+open, admin, `{"proof_of_work":null}`)
	require.Equal(t, http.StatusOK, off.Status, off.Raw)
	require.Nil(t, off.Body["proof_of_work"])
	require.Equal(t, http.StatusAccepted, claim(open, "grace", "").Status)
	requireError(t, f.do("GET", "/v1/challenge", "", ""), http.StatusUnauthorized, "unauthorized")
}
