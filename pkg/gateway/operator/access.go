package operator

import (
	"net/http"

	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
)

// The access codes an operator issues (pkg/access): nothing is stored; a
// code is made again the same from the same key.

// MaxAccessUsers bounds the users of one POST .../access-codes; more are
// issued by the command line (gateway access-codes), which streams.
const MaxAccessUsers = 10_000

var errAccessUsers = httpapi.BadRequest("invalid_field",
	"users must be 1 to 10000 user ids, each 1-64 characters of A-Z a-z 0-9 _ . @ -")

type accessCodesRequest struct {
	Users []string `json:"users"`
}

type accessCodeJSON struct {
	User string `json:"user"`
	Code string `json:"code"`
}

// issueAccessCodes: POST /admin/v1/vouchers/{id}/access-codes
// {"users": [...]} → {"codes": [{"user", "code"}]}, in the users' order:
// each user's code for the voucher. Nothing is stored; a code is made
// again the same from the same key.
func (a *API) issueAccessCodes(w http.ResponseWriter, r *http.Request) {
	id, ok := a.adminAndID(w, r)
	if !ok {
		return
	}
	var req accessCodesRequest
	if err := httpapi.DecodeJSON(w, r, &req, maxAccessBytes); err != nil {
		a.Fail(w, r, err)
		return
	}
	if len(req.Users) == 0 || len(req.Users) > MaxAccessUsers {
		a.Fail(w, r, errAccessUsers)
		return
	}
	for _, u := range req.Users {
		if !httpapi.ValidUser(u) {
			a.Fail(w, r, errAccessUsers)
			return
		}
	}
	if _, err := a.voucherOf(r, id); err != nil {
		a.Fail(w, r, err)
		return
	}
	out := struct {
		Codes []accessCodeJSON `json:"codes"`
	}{Codes: make([]accessCodeJSON, len(req.Users))}
	for i, u := range req.Users {
		out.Codes[i] = accessCodeJSON{User: u, Code: a.Access.Code(id, u)}
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
}

// maxAccessBytes bounds the body of POST .../access-codes: MaxAccessUsers
// ids of 64 characters, quoted, with room to spare.
const maxAccessBytes = MaxAccessUsers * 80
