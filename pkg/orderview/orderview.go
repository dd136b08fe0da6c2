// Package orderview is an order as the API shows it: GET /v1/orders/{id}
// and the data of the order events (pkg/event).
package orderview

import (
	"strconv"
	"time"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/order"
)

// Order is an order as the API shows it; ids are strings because they
// exceed what JavaScript numbers hold exactly.
type Order struct {
	OrderID   string     `json:"order_id"`
	VoucherID string     `json:"voucher_id"`
	UserID    string     `json:"user_id"`
	Quantity  int64      `json:"quantity"`
	Amount    int64      `json:"amount,omitempty"` // an envelope's amount, in minor units
	Code      string     `json:"code,omitempty"`   // a code, once paid (see Of)
	Status    string     `json:"status"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	PaidAt    *time.Time `json:"paid_at,omitempty"`
	// Draw is set for an entry of a draw sale: entered (before the draw),
	// won (it is an order: see status) or lost.
	Draw string `json:"draw,omitempty"`
}

// Words of Order.Draw.
const (
	DrawEntered = "entered"
	DrawWon     = "won"
	DrawLost    = "lost"
)

// drawWord is what order row o is in its draw ("" if it is no entry).
func drawWord(o db.Order) string {
	switch {
	case o.Drawn > 0:
		return DrawWon
	case o.Status == string(order.StatusEntered):
		return DrawEntered
	case o.Status == string(order.StatusLost):
		return DrawLost
	}
	return ""
}

// Of is order row o as the API shows it.
func Of(o db.Order) Order {
	j := Order{OrderID: strconv.FormatInt(o.ID, 10), VoucherID: strconv.FormatInt(o.VoucherID, 10), UserID: o.UserID, Quantity: max(o.Quantity, 1),
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
