package gateway

import (
	"errors"
	"net/http"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/orderview"
)

// orderJSON is an order as the API shows it (pkg/orderview: the events
// carry the same).
type orderJSON = orderview.Order

func fromRow(o db.Order) orderJSON { return orderview.Of(o) }

const drawEntered = orderview.DrawEntered

// findOrder returns user's order id: from MySQL, or from its stream while it
// is pending. Someone else's order is not found.
func (g *Gateway) findOrder(r *http.Request, id int64, user string) (orderJSON, error) {
	ctx := r.Context()
	for attempt := 0; attempt < 2; attempt++ {
		row, err := g.dbOf(r).Order(ctx, id)
		if err == nil {
			if row.UserID != user {
				return orderJSON{}, errOrderMissing
			}
			return fromRow(row), nil
		}
		if !errors.Is(err, db.ErrNotFound) {
			return orderJSON{}, err
		}
		if attempt == 1 {
			break
		}
		p, found, err := g.redis.PendingOrder(ctx, id)
		if err != nil {
			return orderJSON{}, err
		}
		if found {
			if p.UserID != user {
				return orderJSON{}, errOrderMissing
			}
			return pendingOut(p), nil
		}
		// Not in the stream either: it may have been persisted in between.
	}
	return orderJSON{}, errOrderMissing
}

// getOrder: GET /v1/orders/{id}, for the order's owner.
func (g *Gateway) getOrder(w http.ResponseWriter, r *http.Request) {
	user, id, ok := g.userAndID(w, r)
	if !ok {
		return
	}
	o, err := g.findOrder(r, id, user)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, o)
}

var errBuyerPayOff = httpapi.NewError(http.StatusNotFound, "not_found",
	"buyers do not mark orders paid here: the payment provider confirms payments (FLASHSALE_BUYER_PAY is off)")

// buyerPay answers 404 unless FLASHSALE_BUYER_PAY opened /pay, before
// anything else (a MySQL slot, a token check): a buyer who could call it
// would get units and codes without paying.
func (g *Gateway) buyerPay(h http.HandlerFunc) http.HandlerFunc {
	if g.cfg.BuyerPay {
		return h
	}
	return func(w http.ResponseWriter, _ *http.Request) { httpapi.WriteError(w, errBuyerPayOff) }
}

// payOrder: POST /v1/orders/{id}/pay, open only with FLASHSALE_BUYER_PAY
// (demos and tests). Paying twice answers the paid order.
func (g *Gateway) payOrder(w http.ResponseWriter, r *http.Request) {
	user, id, ok := g.userAndID(w, r)
	if !ok {
		return
	}
	// Two rounds: an order found pending may be persisted a moment later.
	for attempt := 0; ; attempt++ {
		row, err := g.dbOf(r).PayOrder(r.Context(), id, user, g.now().UTC())
		if err == nil {
			httpapi.WriteJSON(w, http.StatusOK, fromRow(row))
			return
		}
		if !errors.Is(err, db.ErrNotFound) {
			g.fail(w, r, err)
			return
		}
		o, err := g.findOrder(r, id, user)
		switch {
		case err != nil:
			g.fail(w, r, err)
			return
		case o.Status == string(order.StatusPending) || attempt == 1:
			g.fail(w, r, errOrderPending)
			return
		}
	}
}
