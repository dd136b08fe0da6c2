package gateway

import (
	"errors"
	"net/http"
	"time"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/order"
)

// orderJSON is an order as the API shows it; ids are strings because they
// exceed what JavaScript numbers hold exactly.
type orderJSON struct {
	OrderID   string     `json:"order_id"`
	VoucherID string     `json:"voucher_id"`
	UserID    string     `json:"user_id"`
	Quantity  int64      `json:"quantity"`
	Amount    int64      `json:"amount,omitempty"` // an envelope's amount, in minor units
	Code      string     `json:"code,omitempty"`   // a code, once paid (see fromRow)
	Status    string     `json:"status"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	PaidAt    *time.Time `json:"paid_at,omitempty"`
	// Draw is set for an entry of a draw sale: entered (before the draw),
	// won (it is an order: see status) or lost.
	Draw string `json:"draw,omitempty"`
}

// Words of orderJSON.Draw.
const (
	drawEntered = "entered"
	drawWon     = "won"
	drawLost    = "lost"
)

// drawWord is what order row o is in its draw ("" if it is no entry).
func drawWord(o db.Order) string {
	switch {
	case o.Drawn > 0:
		return drawWon
	case o.Status == string(order.StatusEntered):
		return drawEntered
	case o.Status == string(order.StatusLost):
		return drawLost
	}
	return ""
}

func fromRow(o db.Order) orderJSON {
	j := orderJSON{OrderID: idString(o.ID), VoucherID: idString(o.VoucherID), UserID: o.UserID, Quantity: max(o.Quantity, 1),
		Amount: o.Amount, Status: o.Status, CreatedAt: o.CreatedAt, PaidAt: o.PaidAt, Draw: drawWord(o)}
	// A code is shown to its owner (only an owner sees an order) once the
	// order is paid: an unpaid order may be cancelled and its code sold to
	// somebody else, who must be the only one to have seen it.
	if o.Status == string(order.StatusPaid) {
		j.Code = o.Code
	}
	if o.Status == string(order.StatusCreated) || o.Status == string(order.StatusPaid) {
		j.ExpiresAt = &o.ExpiresAt
	}
	return j
}

// findOrder returns user's order id: from MySQL, or from its stream while it
// is pending. Someone else's order is not found.
func (g *Gateway) findOrder(r *http.Request, id int64, user string) (orderJSON, error) {
	ctx := r.Context()
	for attempt := 0; attempt < 2; attempt++ {
		row, err := g.db.Order(ctx, id)
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
	writeJSON(w, http.StatusOK, o)
}

var errBuyerPayOff = &apiError{http.StatusNotFound, "not_found",
	"buyers do not mark orders paid here: the payment provider confirms payments (FLASHSALE_BUYER_PAY is off)"}

// buyerPay answers 404 unless FLASHSALE_BUYER_PAY opened /pay, before
// anything else (a MySQL slot, a token check): a buyer who could call it
// would get units and codes without paying.
func (g *Gateway) buyerPay(h http.HandlerFunc) http.HandlerFunc {
	if g.cfg.BuyerPay {
		return h
	}
	return func(w http.ResponseWriter, _ *http.Request) { writeError(w, errBuyerPayOff) }
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
		row, err := g.db.PayOrder(r.Context(), id, user, g.now().UTC())
		if err == nil {
			writeJSON(w, http.StatusOK, fromRow(row))
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
