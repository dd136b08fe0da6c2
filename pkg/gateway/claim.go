package gateway

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
)

// claim: POST /v1/vouchers/{id}/orders. One admission script, no MySQL.
//
// Every check a claim passes, in order (docs/ARCHITECTURE.md opens with
// this list); each refusal is answered at once and costs nothing after it:
//
//  1. shed (shed.go), before the router: a chunked body (411), the
//     in-flight bound (503 overloaded), the address's rate (429);
//  2. userAndID: the bearer token (401), the user's rate (429), the id;
//  3. the Idempotency-Key's form (400);
//  4. claimQuantity: the body, read within its deadline, {"quantity": N} (400, 408, 413, 415);
//  5. claimProof (proof.go): a proof of work's signature, user, voucher
//     and expiry (403 proof_invalid), before Redis; its refusal is
//     answered after step 6's;
//  6. soldOut.Prune (pkg/soldout): a voucher Redis said is sold out, for
//     FLASHSALE_SOLD_OUT_REFRESH, answered 409 without Redis (a claim
//     with a good proof and without an Idempotency-Key);
//  7. claimAccess (access.go) verifies an access code's user and voucher
//     for the script, which refuses a wrong one only where the voucher
//     needs a code now (403 access_invalid);
//  8. roomPass (room.go): a voucher with a waiting room wants a pass that
//     holds (403 not_admitted), from this gateway's last state of the room
//     (pkg/room's Cache);
//  9. admitClaim: admit.lua, through the batcher (rdb/admission:
//     batcher.go, admit.go), decides the rest in Redis, atomically: the sale
//     window, pause, an access code where the voucher needs one now, the
//     proof's difficulty and single use, the pass,
//     stock, per-user and per-day limits, an idempotent replay, the
//     deduction and the order's XADD; a hot voucher's dry bucket is
//     refilled from the others (rdb/buckets.go) and asked again;
//  10. the answer: 202 (admittedBody), or the script's refusal mapped to its
//     status in one place (errors.go); a keyed retry the checks 5 and 8
//     refuse is answered from its first admission (refuseUnlessReplayed);
//     a claim sent whose reply did not come in time, 503 outcome_unknown
//     with its claim_id (outcome.go), and 503 unavailable only for one
//     never sent.
//
// The order is held by a test (doccheck's TestTheClaimsChecksRunInTheListedOrder).
func (g *Gateway) claim(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	user, voucher, ok := g.userAndID(w, r)
	if !ok {
		g.countClaim(resultInvalid, "", start)
		return
	}
	key := httpapi.HeaderValue(r, "Idempotency-Key")
	if key != "" && !httpapi.ValidUser(key) {
		g.fail(w, r, httpapi.ErrBadIdempotencyKey)
		g.countClaim(resultInvalid, "", start)
		return
	}
	qty, err := g.claimQuantity(w, r)
	if err != nil {
		g.fail(w, r, err)
		g.countClaim(resultInvalid, "", start)
		return
	}
	proof, checkErr := g.claimProof(r, user, voucher)
	if checkErr == nil && key == "" && g.soldOut.Prune(voucher, qty) {
		g.metrics.pruned.Inc()
		g.refused.Add(voucher, errSoldOut.Code)
		httpapi.WriteError(w, errSoldOut)
		g.countClaim(resultRejected, errSoldOut.Code, start)
		return
	}
	now := g.now()
	c := admission.Claim{VoucherID: voucher, UserID: user, IdempotencyKey: key, IdempotencyTTL: g.cfg.IdempotencyTTL,
		Now: now, Day: g.days.Of(now), Quantity: qty, Proof: proof, Access: g.claimAccess(r, user, voucher),
		Serial: admission.NewSerial(), Horizon: admission.HorizonAfter(start, g.cfg.ClaimOutcomeTimeout)}
	if checkErr != nil {
		g.refuseUnlessReplayed(w, r, c, checkErr, start)
		return
	}
	if c.Pass, err = g.roomPass(r, voucher, user, now); err != nil {
		g.refuseUnlessReplayed(w, r, c, err, start)
		return
	}
	a, err := g.admitClaim(r, c)
	switch {
	case err == nil && !a.Replayed:
		g.soldOut.Admitted(voucher)
	case key == "" && errors.Is(err, rdb.ErrSoldOut):
		g.soldOut.SoldOutFor(voucher, qty)
	}
	switch {
	case err != nil && isOutcomeUnknown(err):
		g.answerUnknown(w, c, start)
	case err != nil:
		g.claimFailed(w, r, voucher, err, start)
	default:
		g.answerAdmitted(w, a, start)
	}
}

// admitClaim runs c's admission. A claim without a pass on a voucher
// whose room this gateway did not know (it restarted, or nobody asked it
// about the room lately) is refused by the script: the gateway learns the
// voucher has a room, and its next claims without a queue token are
// refused from memory. One case runs the script twice: the room appeared
// between the gateway's reading and the script's; a claim with its queue
// token then runs once more with its pass. An unknown room means "ask
// Redis", never "no pass"; knowing it up front would cost every room-less
// voucher's claims a read (roomPass).
func (g *Gateway) admitClaim(r *http.Request, c admission.Claim) (admission.Admission, error) {
	a, err := g.admitNow(r.Context(), c)
	if c.Pass != "" || !errors.Is(err, rdb.ErrNotAdmitted) {
		return a, err
	}
	g.rooms.Learn(c.VoucherID, nil).Set(nil, nil) // it has a room: the next claims are decided here
	if pass, perr := g.roomPass(r, c.VoucherID, c.UserID, c.Now); perr == nil && pass != "" {
		c.Pass = pass
		return g.admitNow(r.Context(), c)
	}
	return a, err
}

// admitNow is one admission of c, bounded by ClaimTimeout, its time
// observed: through the batcher when claims are pipelined (the batcher
// bounds each), else alone.
func (g *Gateway) admitNow(ctx context.Context, c admission.Claim) (a admission.Admission, err error) {
	t0 := time.Now()
	if g.batcher != nil {
		a, err = g.batcher.Admit(ctx, c)
	} else {
		ctx, cancel := context.WithTimeout(ctx, g.cfg.ClaimTimeout)
		a, err = g.admitter.Admit(ctx, c)
		cancel()
	}
	g.metrics.scriptSeconds.Observe(time.Since(t0).Seconds())
	return a, err
}

// refuseUnlessReplayed answers claim c, which the gateway's own checks
// refused with err (its proof, its room pass), with that refusal, unless
// c carries an idempotency key an earlier claim was admitted under: a
// retry gets its first admission, whatever lapsed or expired since, as
// the admission script would answer it.
func (g *Gateway) refuseUnlessReplayed(w http.ResponseWriter, r *http.Request, c admission.Claim, err error, start time.Time) {
	if c.IdempotencyKey != "" {
		ctx, cancel := context.WithTimeout(r.Context(), g.cfg.ClaimTimeout)
		a, ok, rerr := g.admitter.Replay(ctx, c)
		cancel()
		switch {
		case rerr != nil:
			err = rerr
		case ok:
			g.answerAdmitted(w, a, start)
			return
		}
	}
	if err == errProofInvalid {
		g.fail(w, r, err)
		g.countClaim(resultInvalid, "", start)
		return
	}
	g.claimFailed(w, r, c.VoucherID, err, start)
}

// answerAdmitted writes the 202 of admission a, and counts it.
func (g *Gateway) answerAdmitted(w http.ResponseWriter, a admission.Admission, start time.Time) {
	w.Header()["Content-Type"] = httpapi.JSONContentType
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write(admittedBody(a))
	switch {
	case a.Replayed:
		g.countClaim(resultReplayed, "", start)
	case a.Entry:
		g.countClaim(resultEntered, "", start)
	default:
		g.countClaim(resultAdmitted, "", start)
	}
}

// claimFailed answers and counts a claim of voucher refused by err (the
// admission script's, or the waiting room's before it).
func (g *Gateway) claimFailed(w http.ResponseWriter, r *http.Request, voucher int64, err error, start time.Time) {
	e := toAPIError(err)
	if e.Status == http.StatusServiceUnavailable {
		g.countClaim(resultUnavailable, "", start)
	} else {
		g.countClaim(resultRejected, e.Code, start)
		if e != httpapi.ErrVoucherMissing { // a voucher that exists: the count is bounded
			g.refused.Add(voucher, e.Code)
		}
	}
	if errors.Is(err, rdb.ErrOverloaded) || errors.Is(err, rdb.ErrNotReplicated) {
		httpapi.WriteError(w, e) // expected under extreme load or a replica's stall: counted, not logged
		return
	}
	g.fail(w, r, err)
}

// admittedBody is the 202 answer, written by hand on the hot path: the
// order id and, for an envelope, its amount; for a draw, the entry id. A code is not shown before
// its order is paid (see fromRow).
func admittedBody(a admission.Admission) []byte {
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

var errBadQuantity = httpapi.BadRequest("invalid_field", "quantity must be a whole number from 1 to the voucher's per_user_limit (1 for envelopes and codes)")

// claimQuantity reads the claim's optional body {"quantity": N}: no body,
// or no quantity, is 1. Whether N is within the voucher's per-user limit
// is decided by the admission script, which knows the limit.
func (g *Gateway) claimQuantity(w http.ResponseWriter, r *http.Request) (int64, error) {
	body, err := g.readBody(w, r, httpapi.MaxBodyBytes, bodyReadTimeout)
	switch {
	case err != nil:
		return 0, err
	case len(bytes.TrimSpace(body)) == 0:
		return 1, nil
	}
	var req claimRequest
	if err := httpapi.DecodeBody(r, body, &req); err != nil {
		var ae *httpapi.Error
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
