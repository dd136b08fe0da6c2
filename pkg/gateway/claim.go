package gateway

import (
	"context"
	"errors"
	"net/http"

	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
)

var errBadIdempotencyKey = badRequest("invalid_idempotency_key", "Idempotency-Key must be 1-64 characters of A-Z a-z 0-9 _ . @ -")

// claim: POST /v1/vouchers/{id}/orders. One admission script, no MySQL.
func (g *Gateway) claim(w http.ResponseWriter, r *http.Request) {
	user, voucher, ok := g.userAndID(w, r)
	if !ok {
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key != "" && !validToken(key) {
		g.fail(w, r, errBadIdempotencyKey)
		return
	}
	now := g.now()
	ctx, cancel := context.WithTimeout(r.Context(), g.cfg.ClaimTimeout)
	defer cancel()
	a, err := g.redis.Admit(ctx, rdb.Claim{
		VoucherID: voucher, UserID: user, IdempotencyKey: key, IdempotencyTTL: g.cfg.IdempotencyTTL,
		Now: now, Day: order.Day(now, g.loc),
	})
	if err != nil {
		e := toAPIError(err)
		if c, ok := g.rejected[e.Code]; ok {
			c.Add(1)
		} else {
			g.unavailable.Add(1)
		}
		if errors.Is(err, rdb.ErrOverloaded) {
			writeError(w, e) // expected under extreme load: counted, not logged
			return
		}
		g.fail(w, r, err)
		return
	}
	if a.Replayed {
		g.replayed.Add(1)
	} else {
		g.admitted.Add(1)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write([]byte(`{"order_id":"` + idString(a.OrderID) + `","status":"pending"}` + "\n"))
}
