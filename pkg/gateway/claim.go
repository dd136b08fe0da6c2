package gateway

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
)

var errBadIdempotencyKey = badRequest("invalid_idempotency_key", "Idempotency-Key must be 1-64 characters of A-Z a-z 0-9 _ . @ -")

// claim: POST /v1/vouchers/{id}/orders. One admission script, no MySQL.
func (g *Gateway) claim(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	user, voucher, ok := g.userAndID(w, r)
	if !ok {
		g.countClaim(resultInvalid, "", start)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key != "" && !validToken(key) {
		g.fail(w, r, errBadIdempotencyKey)
		g.countClaim(resultInvalid, "", start)
		return
	}
	var proof rdb.Proof
	qty, err := g.claimQuantity(w, r)
	if err == nil {
		proof, err = g.claimProof(r, user)
	}
	if err != nil {
		g.fail(w, r, err)
		g.countClaim(resultInvalid, "", start)
		return
	}
	if key == "" && g.soldOut.prune(voucher, qty) {
		g.metrics.pruned.Inc()
		g.refused.add(voucher, errSoldOut.Code)
		writeError(w, errSoldOut)
		g.countClaim(resultRejected, errSoldOut.Code, start)
		return
	}
	now := g.now()
	pass, err := g.roomPass(r, voucher, user, now)
	if err != nil {
		g.claimFailed(w, r, voucher, err, start)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), g.cfg.ClaimTimeout)
	defer cancel()
	t0 := time.Now()
	a, err := g.admit(ctx, rdb.Claim{
		VoucherID: voucher, UserID: user, IdempotencyKey: key, IdempotencyTTL: g.cfg.IdempotencyTTL,
		Now: now, Day: order.Day(now, g.loc), Quantity: qty, Proof: proof, Pass: pass,
	})
	g.metrics.scriptSeconds.Observe(time.Since(t0).Seconds())
	switch {
	case err == nil && !a.Replayed:
		g.soldOut.admitted(voucher)
	case key == "" && errors.Is(err, rdb.ErrSoldOut):
		g.soldOut.soldOutFor(voucher, qty)
	case errors.Is(err, rdb.ErrNotAdmitted):
		g.rooms.learn(voucher, nil) // the next claims are decided here
	}
	if err != nil {
		g.claimFailed(w, r, voucher, err, start)
		return
	}
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write(admittedBody(a))
	if a.Replayed {
		g.countClaim(resultReplayed, "", start)
		return
	}
	if a.Entry {
		g.countClaim(resultEntered, "", start)
		return
	}
	g.countClaim(resultAdmitted, "", start)
}

// claimFailed answers and counts a claim of voucher refused by err (the
// admission script's, or the waiting room's before it).
func (g *Gateway) claimFailed(w http.ResponseWriter, r *http.Request, voucher int64, err error, start time.Time) {
	e := toAPIError(err)
	if e.Status == http.StatusServiceUnavailable {
		g.countClaim(resultUnavailable, "", start)
	} else {
		g.countClaim(resultRejected, e.Code, start)
		if e != errVoucherMissing { // a voucher that exists: the count is bounded
			g.refused.add(voucher, e.Code)
		}
	}
	if errors.Is(err, rdb.ErrOverloaded) || errors.Is(err, rdb.ErrNotReplicated) {
		writeError(w, e) // expected under extreme load or a replica's stall: counted, not logged
		return
	}
	g.fail(w, r, err)
}

// admittedBody is the 202 answer, written by hand on the hot path: the
// order id and, for an envelope, its amount; for a draw, the entry id. A code is not shown before
// its order is paid (see fromRow).
func admittedBody(a rdb.Admission) []byte {
	b := make([]byte, 0, 96)
	if a.Entry {
		b = append(b, `{"entry_id":"`...)
		b = strconv.AppendInt(b, a.OrderID, 10)
		return append(b, `","status":"entered"}`+"\n"...)
	}
	b = append(b, `{"order_id":"`...)
	b = strconv.AppendInt(b, a.OrderID, 10)
	b = append(b, `","status":"pending"`...)
	if a.Item.Amount > 0 {
		b = append(b, `,"amount":`...)
		b = strconv.AppendInt(b, a.Item.Amount, 10)
	}
	return append(b, "}\n"...)
}

func (g *Gateway) countClaim(result, reason string, start time.Time) {
	o := g.metrics.outcome(result, reason)
	o.count.Inc()
	o.seconds.Observe(time.Since(start).Seconds())
}

type claimRequest struct {
	Quantity *int64 `json:"quantity"`
}

var errBadQuantity = badRequest("invalid_field", "quantity must be a whole number from 1 to the voucher's per_user_limit (1 for envelopes and codes)")

// claimQuantity reads the claim's optional body {"quantity": N}: no body,
// or no quantity, is 1. Whether N is within the voucher's per-user limit
// is decided by the admission script, which knows the limit.
func (g *Gateway) claimQuantity(w http.ResponseWriter, r *http.Request) (int64, error) {
	body, err := g.readBody(w, r, maxBodyBytes, bodyReadTimeout)
	switch {
	case err != nil:
		return 0, err
	case len(bytes.TrimSpace(body)) == 0:
		return 1, nil
	}
	var req claimRequest
	if err := decodeJSON(w, r, &req); err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.Code == "invalid_field" {
			return 0, errBadQuantity
		}
		return 0, err
	}
	if req.Quantity == nil {
		return 1, nil
	}
	if *req.Quantity < 1 || *req.Quantity > order.MaxQuantity {
		return 0, errBadQuantity
	}
	return *req.Quantity, nil
}
