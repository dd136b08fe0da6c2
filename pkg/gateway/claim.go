package gateway

import (
	"context"
	"errors"
	"net/http"
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
	now := g.now()
	ctx, cancel := context.WithTimeout(r.Context(), g.cfg.ClaimTimeout)
	defer cancel()
	t0 := time.Now()
	a, err := g.admit(ctx, rdb.Claim{
		VoucherID: voucher, UserID: user, IdempotencyKey: key, IdempotencyTTL: g.cfg.IdempotencyTTL,
		Now: now, Day: order.Day(now, g.loc),
	})
	g.metrics.scriptSeconds.Observe(time.Since(t0).Seconds())
	if err != nil {
		e := toAPIError(err)
		if e.Status == http.StatusServiceUnavailable {
			g.countClaim(resultUnavailable, "", start)
		} else {
			g.countClaim(resultRejected, e.Code, start)
		}
		if errors.Is(err, rdb.ErrOverloaded) {
			writeError(w, e) // expected under extreme load: counted, not logged
			return
		}
		g.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write([]byte(`{"order_id":"` + idString(a.OrderID) + `","status":"pending"}` + "\n"))
	if a.Replayed {
		g.countClaim(resultReplayed, "", start)
		return
	}
	g.countClaim(resultAdmitted, "", start)
}

func (g *Gateway) countClaim(result, reason string, start time.Time) {
	o := g.metrics.outcome(result, reason)
	o.count.Inc()
	o.seconds.Observe(time.Since(start).Seconds())
}
