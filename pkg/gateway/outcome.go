package gateway

// A claim's answer says what the admission script did, or that the
// gateway cannot know yet (with pkg/rdb's batcher.go):
//
//   - Not sent. A claim waits in the batcher to be sent at most
//     FLASHSALE_CLAIM_TIMEOUT; one still waiting then is never sent
//     (rdb.ErrNotSent): 503 unavailable. So is one that found no
//     connection (the pool's wait, a refused dial) and one Redis refused
//     before the script ran (LOADING, CLUSTERDOWN, NOSCRIPT). The script
//     did not run and never will: the answer is the truth.
//   - Sent, answered in time. Once written, a claim's call is not given
//     up before its reply, or FLASHSALE_CLAIM_OUTCOME_TIMEOUT (30 s):
//     admissions go on connections of their own whose read timeout is
//     that long (rdb.Store.SetAdmitClient); the store's other connections
//     keep FLASHSALE_REDIS_TIMEOUT. The caller waits for the reply until
//     FLASHSALE_CLAIM_REPLY_TIMEOUT (1 s) after its arrival: 202 or the
//     script's refusal.
//   - Sent, reply late. Past that, the caller is answered 503
//     outcome_unknown with a claim_id, and the call goes on. When the
//     reply comes, the batcher hands the outcome to the gateway (Late),
//     which records it beside the voucher for FLASHSALE_IDEMPOTENCY_TTL
//     (flashsale:{pP}:v:V:claim:USER:MS[:KEY]). A claim answered in time
//     has no record: it costs Redis nothing.
//   - Sent, reply lost (the connection broke or timed out after the
//     write; a master killed): 503 outcome_unknown. The script may have
//     run. So is a claim admitted on a master whose replicas did not
//     acknowledge it in time (FLASHSALE_REDIS_DURABILITY): it may not
//     survive a failover.
//
// GET /v1/vouchers/{id}/claims/{claim_id} decides such a claim. The id is
// MS.MAC[.KEY]: the claim's time in ms (the gateway's clock; the order
// the script makes carries it as created_ms), a MAC (HMAC-SHA256, a key
// derived from the admin token) of the voucher, the user, the time and
// the key, and the claim's Idempotency-Key if it had one. An id that
// does not verify is 404, without a Redis call. The first that tells:
//
//  1. the recorded outcome;
//  2. a keyed claim: its idempotency record (admitted under that key);
//     an unkeyed one: the buyer's order of the voucher created at MS, in
//     the stream (pending.lua, the buyer's index), then in MySQL;
//  3. neither, more than FLASHSALE_CLAIM_OUTCOME_TIMEOUT and a second
//     since MS, and Redis answered step 1: refused (unavailable). The
//     gateway that sent the call has recorded its reply, or closed its
//     connection, by then; what was written on a closed connection runs
//     when Redis reads it, before it answers later reads;
//  4. else unknown, with Retry-After.
//
// Why it is exact: an admission and its order are written by one script,
// atomically, so "the order exists" and "the script admitted it" are one
// fact; a record is that script's reply; a claim told refused by step 3
// can no longer run. The limits: two unkeyed claims of one buyer for one
// voucher in the same millisecond (two gateways, both late) resolve to
// the same order, which the buyer holds; gateways whose clocks differ by
// more than a second can tell refused early. (Step 3 rests on one Redis
// process reading every connection's input in the turn it answers a
// read: a master frozen past the horizon and failed over meanwhile runs,
// when it wakes, what it held for the gateway as a master its replica
// has replaced, and loses it in its resync.) A client that
// sends an Idempotency-Key (the queue page does, one a press) avoids the
// first two: its claim resolves by its key, and a retry with the key is
// the same claim.

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/orderview"
	"github.com/flashsale/flashsale/pkg/rdb"
)

var (
	errOutcomeUnknown = httpapi.NewError(http.StatusServiceUnavailable, "outcome_unknown",
		"the claim reached Redis and its answer did not come in time: it may have been admitted. Ask GET /v1/vouchers/{id}/claims/{claim_id} for its outcome before claiming again")
	errBadClaimID   = httpapi.BadRequest("invalid_claim_id", "claim_id is not a claim id this API gives")
	errClaimMissing = httpapi.NewError(http.StatusNotFound, "claim_not_found", "no such claim of yours")
)

// outcomeMargin is added to FLASHSALE_CLAIM_OUTCOME_TIMEOUT before a claim
// nobody recorded and no order of which exists is told refused: the
// gateways' clocks may differ by that much.
const outcomeMargin = time.Second

// A claim id is "MS.MAC" or "MS.MAC.KEY": the claim's time (unix ms, the
// created_ms of the order it made, if any), a MAC of the voucher, the
// user, the time and the key, and the claim's Idempotency-Key if it had
// one. Only the gateways make them: one that does not verify is no claim
// of this user's (404), without a Redis call.
const claimMACLen = 32 // hex digits

func (g *Gateway) claimMAC(ref rdb.ClaimRef) string {
	m := hmac.New(sha256.New, g.claimKey)
	m.Write([]byte(strconv.FormatInt(ref.VoucherID, 10) + "\x00" + ref.UserID + "\x00" + strconv.FormatInt(ref.MS, 10) + "\x00" + ref.Key))
	return hex.EncodeToString(m.Sum(nil))[:claimMACLen]
}

// claimID is the id of the claim ref.
func (g *Gateway) claimID(ref rdb.ClaimRef) string {
	id := strconv.FormatInt(ref.MS, 10) + "." + g.claimMAC(ref)
	if ref.Key != "" {
		id += "." + ref.Key
	}
	return id
}

// parseClaimID is the claim of user and voucher that id names:
// errBadClaimID when it is no claim id's form, errClaimMissing when its MAC
// is not this user's and voucher's.
func (g *Gateway) parseClaimID(id, user string, voucher int64) (rdb.ClaimRef, error) {
	parts := strings.SplitN(id, ".", 3)
	if len(parts) < 2 || len(parts[0]) == 0 || len(parts[0]) > 15 || len(parts[1]) != claimMACLen {
		return rdb.ClaimRef{}, errBadClaimID
	}
	ms, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || ms <= 0 || parts[0][0] == '+' {
		return rdb.ClaimRef{}, errBadClaimID
	}
	if _, err := hex.DecodeString(parts[1]); err != nil {
		return rdb.ClaimRef{}, errBadClaimID
	}
	ref := rdb.ClaimRef{VoucherID: voucher, UserID: user, MS: ms}
	if len(parts) == 3 {
		if !httpapi.ValidUser(parts[2]) {
			return rdb.ClaimRef{}, errBadClaimID
		}
		ref.Key = parts[2]
	}
	if !hmac.Equal([]byte(parts[1]), []byte(g.claimMAC(ref))) {
		return rdb.ClaimRef{}, errClaimMissing
	}
	return ref, nil
}

// isOutcomeUnknown reports whether err, a claim's admission's, leaves its
// outcome unknown: it was sent and no reply was read in time, or it was
// admitted on a master that did not get it to its replicas in time (it
// may not survive a failover).
func isOutcomeUnknown(err error) bool {
	return errors.Is(err, rdb.ErrOutcomeUnknown) || errors.Is(err, rdb.ErrNotReplicated)
}

// answerUnknown answers claim c, whose outcome is unknown, 503
// outcome_unknown with the claim's id.
func (g *Gateway) answerUnknown(w http.ResponseWriter, c rdb.Claim, start time.Time) {
	g.countClaim(resultOutcomeUnknown, "", start)
	g.unknown.Add(c.VoucherID, "answered")
	w.Header().Set("Retry-After", "1")
	httpapi.WriteJSON(w, http.StatusServiceUnavailable, struct {
		*httpapi.Error
		ClaimID string `json:"claim_id"`
	}{errOutcomeUnknown, g.claimID(rdb.RefOf(c))})
}

// recordLate records the outcomes of claims answered outcome_unknown
// whose replies came after all (the batcher's Late), off the batcher's
// worker.
func (g *Gateway) recordLate(late []rdb.LateOutcome) {
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
		if err := g.redis.RecordOutcomes(ctx, late, g.cfg.IdempotencyTTL); err != nil {
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
// claim of the caller's answered outcome_unknown. In order: the outcome
// its gateway recorded when the reply came; for a keyed claim, the
// admission under its key; else the buyer's order made at the claim's
// time (pending in Redis, or in MySQL). None of them: refused once no
// reply can come any more (FLASHSALE_CLAIM_OUTCOME_TIMEOUT and a second
// after the claim), unknown before, or while Redis does not answer.
func (g *Gateway) getClaim(w http.ResponseWriter, r *http.Request) {
	user, voucher, ok := g.userAndID(w, r)
	if !ok {
		return
	}
	ref, err := g.parseClaimID(r.PathValue("claim_id"), user, voucher)
	if err != nil {
		g.fail(w, r, err)
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

func (g *Gateway) resolveClaim(r *http.Request, ref rdb.ClaimRef) (claimOutcome, error) {
	ctx := r.Context()
	o, found, err := g.redis.ClaimOutcome(ctx, ref)
	asked := g.now() // Redis answered by now: a call sent before the horizon has run, or never will
	switch {
	case err != nil:
		return claimOutcome{}, err
	case found && o.Admitted:
		return admittedOutcome(o.Admission), nil
	case found:
		return refusedOutcome(o.Refusal), nil
	}
	if ref.Key != "" {
		a, ok, err := g.redis.Replay(ctx, rdb.Claim{VoucherID: ref.VoucherID, UserID: ref.UserID, IdempotencyKey: ref.Key})
		switch {
		case err != nil:
			return claimOutcome{}, err
		case ok:
			return admittedOutcome(a), nil
		}
	} else {
		a, ok, err := g.orderAt(r, ref)
		switch {
		case err != nil:
			return claimOutcome{}, err
		case ok:
			return admittedOutcome(a), nil
		}
	}
	if asked.Sub(time.UnixMilli(ref.MS)) > g.cfg.ClaimOutcomeTimeout+outcomeMargin {
		g.metrics.lateOutcomes.WithLabelValues("refused_by_time").Inc()
		return refusedOutcome(rdb.ErrNotSent), nil
	}
	return claimOutcome{Status: "unknown"}, nil
}

// orderAt is the buyer's order of ref's voucher made at ref's time: the
// stream first, then MySQL, so one persisted in between is found.
func (g *Gateway) orderAt(r *http.Request, ref rdb.ClaimRef) (rdb.Admission, bool, error) {
	pending, err := g.redis.UserPending(r.Context(), ref.VoucherID, ref.UserID)
	if err != nil {
		return rdb.Admission{}, false, err
	}
	for _, p := range pending {
		if p.CreatedAt.UnixMilli() == ref.MS {
			return rdb.Admission{OrderID: p.ID, Item: p.Item, Entry: p.Entry}, true, nil
		}
	}
	rows, err := g.dbOf(r).UserOrders(r.Context(), ref.VoucherID, ref.UserID, 1000)
	if err != nil {
		return rdb.Admission{}, false, err
	}
	for _, o := range rows {
		if o.CreatedAt.UnixMilli() == ref.MS {
			return rdb.Admission{OrderID: o.ID, Item: order.Item{Amount: o.Amount}, Entry: orderview.Of(o).Draw != ""}, true, nil
		}
	}
	return rdb.Admission{}, false, nil
}

func admittedOutcome(a rdb.Admission) claimOutcome {
	if a.Entry {
		return claimOutcome{Status: "admitted", EntryID: strconv.FormatInt(a.OrderID, 10)}
	}
	return claimOutcome{Status: "admitted", OrderID: strconv.FormatInt(a.OrderID, 10), Amount: a.Item.Amount}
}

// refusedOutcome is a refusal's outcome, named by its answer's code;
// "unavailable" for a claim no call that could admit it ran for.
func refusedOutcome(err error) claimOutcome {
	return claimOutcome{Status: "refused", Error: toAPIError(err).Code}
}
