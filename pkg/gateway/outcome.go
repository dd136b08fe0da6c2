package gateway

// A claim's answer says what the admission script did, or that the
// gateway cannot know yet (with pkg/rdb's batcher.go):
//
//   - Not sent. A claim waits in the batcher to be sent at most
//     FLASHSALE_CLAIM_TIMEOUT; one still waiting then is never sent
//     (admission.ErrNotSent): 503 unavailable. So is one that found no
//     connection (the pool's wait, a refused dial) and one Redis refused
//     before the script ran (LOADING, CLUSTERDOWN, NOSCRIPT). The script
//     did not run and never will: the answer is the truth.
//   - Sent, answered in time. Once written, a claim's call is not given
//     up before its reply, or FLASHSALE_CLAIM_OUTCOME_TIMEOUT (30 s):
//     admissions go on connections of their own whose read timeout is
//     that long (admission.New's ac); the store's other connections
//     keep FLASHSALE_REDIS_TIMEOUT. The caller waits for the reply until
//     FLASHSALE_CLAIM_REPLY_TIMEOUT (1 s) after its arrival: 202 or the
//     script's refusal.
//   - Sent, reply late. Past that, the caller is answered 503
//     outcome_unknown with a claim_id, and the call goes on. When the
//     reply comes, the batcher hands the outcome to the gateway (Late),
//     which records it beside the voucher for FLASHSALE_IDEMPOTENCY_TTL
//     (flashsale:{pP}:v:V:claim:USER:MS:SERIAL[:KEY]). A claim answered
//     in time has no record: it costs Redis nothing.
//   - Sent, reply lost (the connection broke or timed out after the
//     write; a master killed): 503 outcome_unknown. The script may have
//     run. So is a claim admitted on a master whose replicas did not
//     acknowledge it in time (FLASHSALE_REDIS_DURABILITY): it may not
//     survive a failover.
//
// Every claim carries a serial (admission.NewSerial: 64 random bits), which the
// order it makes carries too, and a horizon: its arrival plus
// FLASHSALE_CLAIM_OUTCOME_TIMEOUT, rounded up to a second. admit.lua
// undoes an admission whose stream entry's id, Redis's clock, is past
// the horizon of a claim of its call (rdb.ErrPastHorizon: nothing taken),
// so a call held in a network or in the gateway kernel's send queue (a
// socket closed at its read timeout keeps sending for up to a minute)
// cannot take anything after its horizon, whenever its bytes arrive.
//
// GET /v1/vouchers/{id}/claims/{claim_id} decides such a claim. The id is
// MS.HORIZON.SERIAL.MAC[.KEY]: the claim's time in ms (the gateway's
// clock; the order the script makes carries it as created_ms), its
// horizon in ms, its serial in hex, a MAC (HMAC-SHA256, a key derived
// from the admin token) of the voucher, the user and those, and the
// claim's Idempotency-Key if it had one. An id that does not verify is
// 404, without a Redis call. The first that tells:
//
//  1. the recorded outcome (outcome.lua, which reads Redis's clock with
//     it);
//  2. a keyed claim: its idempotency record (admitted under that key);
//     an unkeyed one: its own order, the buyer's order of the voucher
//     made at MS with its serial, in the stream (pending.lua, the buyer's
//     index), then in MySQL;
//  3. neither, and the clock read in 1 is past the horizon and a second:
//     refused (unavailable);
//  4. else unknown, with Retry-After.
//
// A decision of step 2 or 3 is recorded as the late reply is: the first
// record of a claim stands (SET NX), so a decided claim is answered
// alike, at the cost of one read, however often it is asked.
//
// Why it is exact: an admission and its order are written by one script,
// atomically, so "the order exists" and "the script admitted it" are one
// fact, and the serial makes it this claim's fact, not a same-millisecond
// twin's; a record is that script's reply or such a fact. A claim told
// refused by step 3 can no longer run: every call that admits after step
// 1's read carries a stream id of that clock or later, past its horizon,
// and is undone; one that admitted before the read is found by step 2.
// The clock assumption: the clock of the Redis holding the voucher's
// partition never steps back by more than a second (outcomeMargin), a
// replica promoted in a failover included. The gateways' clocks do not
// matter to it: a horizon is compared with Redis's clock on both sides.
// A gateway whose clock is more than FLASHSALE_CLAIM_OUTCOME_TIMEOUT
// behind Redis's makes claims that are past their horizon on arrival:
// refused, nothing taken, never misleading. A claim id of a gateway
// before serials (MS.MAC[.KEY]) is resolved by its time alone, with a
// horizon taken FLASHSALE_CLAIM_OUTCOME_TIMEOUT after MS, which its
// gateway did not send to Redis. A client that sends an Idempotency-Key
// (the queue page does, one a press) has its claim resolved by its key,
// and a retry with the key is the same claim.

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/gateway/claimid"
	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/orderview"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
)

var (
	errOutcomeUnknown = httpapi.NewError(http.StatusServiceUnavailable, "outcome_unknown",
		"the claim reached Redis and its answer did not come in time: it may have been admitted. Ask GET /v1/vouchers/{id}/claims/{claim_id} for its outcome before claiming again")
	errBadClaimID   = httpapi.BadRequest("invalid_claim_id", "claim_id is not a claim id this API gives")
	errClaimMissing = httpapi.NewError(http.StatusNotFound, "claim_not_found", "no such claim of yours")
)

// outcomeMargin is added to a claim's horizon before a claim nobody
// recorded and no order of which exists is told refused: Redis's clock,
// which the horizon is held to, may step back by that much (an NTP step,
// a failover to a replica whose clock is behind).
const outcomeMargin = time.Second

// isOutcomeUnknown reports whether err, a claim's admission's, leaves its
// outcome unknown: it was sent and no reply was read in time, or it was
// admitted on a master that did not get it to its replicas in time (it
// may not survive a failover).
func isOutcomeUnknown(err error) bool {
	return errors.Is(err, admission.ErrOutcomeUnknown) || errors.Is(err, rdb.ErrNotReplicated)
}

// answerUnknown answers claim c, whose outcome is unknown, 503
// outcome_unknown with the claim's id.
func (g *Gateway) answerUnknown(w http.ResponseWriter, c admission.Claim, start time.Time) {
	g.countClaim(resultOutcomeUnknown, "", start)
	g.unknown.Add(c.VoucherID, "answered")
	w.Header().Set("Retry-After", "1")
	httpapi.WriteJSON(w, http.StatusServiceUnavailable, struct {
		*httpapi.Error
		ClaimID string `json:"claim_id"`
	}{errOutcomeUnknown, g.claimIDs.ID(admission.RefOf(c))})
}

// recordLate records the outcomes of claims answered outcome_unknown
// whose replies came after all (the batcher's Late), off the batcher's
// worker.
func (g *Gateway) recordLate(late []admission.LateOutcome) {
	for _, o := range late {
		outcome := "refused"
		switch {
		case o.Err == nil:
			outcome = "admitted"
		case isOutcomeUnknown(o.Err):
			outcome = "lost"
		}
		g.metrics.lateOutcomes.WithLabelValues(outcome).Inc()
		g.unknown.Add(o.Claim.VoucherID, outcome)
	}
	g.lateWG.Add(1)
	go func() {
		defer g.lateWG.Done()
		ctx, cancel := context.WithTimeout(context.Background(), g.cfg.ClaimOutcomeTimeout)
		defer cancel()
		if err := g.admitter.RecordOutcomes(ctx, late, g.cfg.IdempotencyTTL); err != nil {
			// The buyers' orders still tell (getClaim).
			g.log.Warn("record late claim outcomes", zap.Int("claims", len(late)), zap.Error(err))
		}
	}()
}

// claimOutcome is the body of GET /v1/vouchers/{id}/claims/{claim_id}.
type claimOutcome struct {
	Status  string `json:"status"` // admitted | refused | unknown
	OrderID string `json:"order_id,omitempty"`
	EntryID string `json:"entry_id,omitempty"`
	Amount  int64  `json:"amount,omitempty"`
	Error   string `json:"error,omitempty"`
}

// getClaim: GET /v1/vouchers/{id}/claims/{claim_id}, the outcome of a
// claim of the caller's answered outcome_unknown (resolveClaim).
func (g *Gateway) getClaim(w http.ResponseWriter, r *http.Request) {
	user, voucher, ok := g.userAndID(w, r)
	if !ok {
		return
	}
	ref, err := g.claimIDs.Parse(r.PathValue("claim_id"), user, voucher)
	switch {
	case errors.Is(err, claimid.ErrNotYours):
		g.fail(w, r, errClaimMissing)
		return
	case err != nil:
		g.fail(w, r, errBadClaimID)
		return
	}
	out, err := g.resolveClaim(r, ref)
	if err != nil {
		g.log.Debug("claim outcome unknown", zap.Error(err))
		out = claimOutcome{Status: "unknown"}
	}
	if out.Status == "unknown" {
		w.Header().Set("Retry-After", "1")
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
}

// resolveClaim decides claim ref: its recorded outcome; else, for a keyed
// claim, the admission under its key, for another the buyer's order that
// the claim made (by its time and serial); else, once Redis's clock is
// past the claim's horizon (and outcomeMargin), refused. A decision is
// recorded (the first one stands), so asking again costs one read.
func (g *Gateway) resolveClaim(r *http.Request, ref admission.ClaimRef) (claimOutcome, error) {
	ctx := r.Context()
	o, found, redisNow, err := g.admitter.ClaimOutcome(ctx, ref)
	switch {
	case err != nil:
		return claimOutcome{}, err
	case found:
		return outcomeOf(o), nil
	}
	// Read before the orders: a call that admits after it carries a
	// stream id of this clock or later, refused past the horizon.
	var a admission.Admission
	if ref.Key != "" {
		a, found, err = g.admitter.Replay(ctx, admission.Claim{VoucherID: ref.VoucherID, UserID: ref.UserID, IdempotencyKey: ref.Key})
	} else {
		a, found, err = g.claimOrder(r, ref)
	}
	switch {
	case err != nil:
		return claimOutcome{}, err
	case found:
		o = admission.Admitted(a)
	case redisNow.After(time.UnixMilli(ref.Horizon).Add(outcomeMargin)):
		g.metrics.lateOutcomes.WithLabelValues("refused_by_time").Inc()
		o = admission.Refused(rdb.ErrPastHorizon)
	default:
		return claimOutcome{Status: "unknown"}, nil
	}
	if recorded, err := g.admitter.DecideOutcome(ctx, ref, o, g.cfg.IdempotencyTTL); err == nil {
		o = recorded
	} else {
		g.log.Debug("record a claim's outcome", zap.Error(err)) // decided all the same: asked again, decided again
	}
	return outcomeOf(o), nil
}

// claimOrder is the order claim ref made, if it was admitted: in the
// stream first, then in MySQL, so one persisted in between is found.
// The claim's serial tells it from the buyer's other claims of the same
// millisecond.
func (g *Gateway) claimOrder(r *http.Request, ref admission.ClaimRef) (admission.Admission, bool, error) {
	pending, err := g.redis.UserPending(r.Context(), ref.VoucherID, ref.UserID)
	if err != nil {
		return admission.Admission{}, false, err
	}
	for _, p := range pending {
		if p.CreatedAt.UnixMilli() == ref.MS && p.Claim == ref.Serial {
			return admission.Admission{OrderID: p.ID, Item: p.Item, Entry: p.Entry}, true, nil
		}
	}
	row, ok, err := g.dbOf(r).ClaimOrder(r.Context(), ref.VoucherID, ref.UserID, time.UnixMilli(ref.MS).UTC(), ref.Serial)
	if err != nil || !ok {
		return admission.Admission{}, false, err
	}
	return admission.Admission{OrderID: row.ID, Item: order.Item{Amount: row.Amount}, Entry: orderview.Of(row).Draw != ""}, true, nil
}

// outcomeOf is outcome o as the API says it.
func outcomeOf(o admission.Outcome) claimOutcome {
	if o.Admitted {
		return admittedOutcome(o.Admission)
	}
	return refusedOutcome(o.Refusal)
}

func admittedOutcome(a admission.Admission) claimOutcome {
	if a.Entry {
		return claimOutcome{Status: "admitted", EntryID: strconv.FormatInt(a.OrderID, 10)}
	}
	return claimOutcome{Status: "admitted", OrderID: strconv.FormatInt(a.OrderID, 10), Amount: a.Item.Amount}
}

// refusedOutcome is a refusal's outcome, named by its answer's code;
// "unavailable" for a claim no call that could admit it ran for (never
// sent, or past its horizon).
func refusedOutcome(err error) claimOutcome {
	return claimOutcome{Status: "refused", Error: toAPIError(err).Code}
}
