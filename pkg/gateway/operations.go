package gateway

import (
	"errors"
	"net/http"
	"strconv"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/payment"
	"github.com/flashsale/flashsale/pkg/settle"
)

// Running a sale: the operator pauses and resumes it and lists vouchers;
// a buyer lists and cancels orders; the payment provider confirms
// payments.

var (
	errNotCancellable = httpapi.NewError(http.StatusConflict, "order_not_cancellable", "the order is paid, completed or failed: it cannot be cancelled")
	errPaused         = httpapi.NewError(http.StatusConflict, "paused", "the sale is paused; retry later")
	errBadSignature   = httpapi.NewError(http.StatusUnauthorized, "unauthorized", "the X-Flashsale-Signature is not t=<unix seconds>,sha256=<hex HMAC-SHA256 of \"<t>.<body>\">")
	errStaleSignature = httpapi.NewError(http.StatusUnauthorized, "unauthorized", "the X-Flashsale-Signature's time t is outside FLASHSALE_PAYMENT_WEBHOOK_TOLERANCE of now: sign again")
)

// listOrders: GET /v1/orders?voucher_id=ID, the caller's own orders of
// that voucher, pending ones included: how a client finds an order whose
// 202 it never received.
func (g *Gateway) listOrders(w http.ResponseWriter, r *http.Request) {
	user, ok := g.user(w, r)
	if !ok {
		return
	}
	v, err := httpapi.VoucherParam(r)
	if err == nil && v == 0 {
		err = httpapi.BadRequest("missing_field", "voucher_id is required")
	}
	if err != nil {
		g.fail(w, r, err)
		return
	}
	ctx := r.Context()
	// The stream first: an order persisted in between is then found in
	// MySQL, never missed (and one in both is listed once).
	pending, err := g.redis.UserPending(ctx, v, user)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	rows, err := g.dbOf(r).UserOrders(ctx, v, user, 1000)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	out := struct {
		Orders []orderJSON `json:"orders"`
	}{Orders: []orderJSON{}}
	seen := map[int64]bool{}
	for _, row := range rows {
		seen[row.ID] = true
		out.Orders = append(out.Orders, fromRow(row))
	}
	for i := len(pending) - 1; i >= 0; i-- {
		if p := pending[i]; !seen[p.ID] {
			out.Orders = append(out.Orders, pendingOut(p))
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
}

// cancelOrder: POST /v1/orders/{id}/cancel, by its owner, before payment:
// the order is cancelled and its units (and item) released exactly once,
// to be sold again.
func (g *Gateway) cancelOrder(w http.ResponseWriter, r *http.Request) {
	user, id, ok := g.userAndID(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	knew := g.now() // before the release is made
	o, rel, err := g.dbOf(r).CancelOrder(ctx, id, user, knew.UTC())
	if errors.Is(err, db.ErrNotFound) {
		// Maybe still pending: the owner retries once it is persisted.
		p, found, perr := g.redis.PendingOrder(ctx, id)
		switch {
		case perr != nil:
			err = perr
		case found && p.UserID == user:
			err = errOrderPending
		default:
			err = errOrderMissing
		}
	}
	if err != nil {
		g.fail(w, r, err)
		return
	}
	if rel != nil {
		// The release is recorded in MySQL: if Redis cannot take it now,
		// the reaper settles it (pkg/settle). The cancellation stands.
		if _, err := settle.Releases(ctx, g.redis, g.dbOf(r), []db.Release{*rel}, knew, g.now()); err != nil {
			g.log.Warn("release of a cancelled order left to the reaper", zap.Int64("order_id", id), zap.Error(err))
		} else {
			g.soldOut.Admitted(o.VoucherID) // its units are back in Redis
		}
		g.log.Info("order cancelled by its owner", zap.Int64("order_id", id), zap.Int64("voucher_id", o.VoucherID))
	}
	httpapi.WriteJSON(w, http.StatusOK, fromRow(o))
}

type webhookRequest struct {
	OrderID   string `json:"order_id"`
	PaymentID string `json:"payment_id"`
}

// paymentWebhook: POST /v1/payments/webhook, from the payment provider.
// The body's HMAC proves the sender; the order is marked paid, once; a
// payment for an order that no longer holds its unit is recorded for a
// refund (refund_due), never sold twice. Anyone can call it, so the body
// is read (small, with a deadline), verified and decoded before a MySQL
// slot is taken: a slow or forged body holds none.
func (g *Gateway) paymentWebhook(w http.ResponseWriter, r *http.Request) {
	if g.cfg.PaymentWebhookSecret == "" {
		httpapi.WriteError(w, httpapi.NewError(http.StatusNotFound, "not_found", "no payment webhook is configured"))
		return
	}
	body, err := g.readBody(w, r, maxWebhookBytes, bodyReadTimeout)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	if err := g.verifyWebhook(r.Header.Get(payment.Header), body); err != nil {
		g.fail(w, r, err)
		return
	}
	var req webhookRequest
	if err := httpapi.DecodeBody(r, body, &req); err != nil {
		g.fail(w, r, err)
		return
	}
	id, err := strconv.ParseInt(req.OrderID, 10, 64)
	if err != nil || id <= 0 {
		g.fail(w, r, httpapi.BadRequest("invalid_field", "order_id must be an order id (a string of digits)"))
		return
	}
	if !httpapi.ValidUser(req.PaymentID) {
		g.fail(w, r, httpapi.BadRequest("invalid_field", "payment_id must be 1-64 characters of A-Z a-z 0-9 _ . @ -"))
		return
	}
	g.withMySQL(w, r, g.cfg.MySQLTimeout, func(w http.ResponseWriter, r *http.Request) {
		g.recordPayment(w, r, id, req.PaymentID)
	})
}

// recordPayment is the webhook's MySQL half, holding a MySQL slot.
func (g *Gateway) recordPayment(w http.ResponseWriter, r *http.Request, id int64, paymentID string) {
	ctx := r.Context()
	p, err := g.dbOf(r).RecordPayment(ctx, id, paymentID, g.now().UTC())
	if errors.Is(err, db.ErrNotFound) {
		if _, found, perr := g.redis.PendingOrder(ctx, id); perr == nil && found {
			err = errOrderPending // the provider retries
		} else {
			err = errOrderMissing
		}
	}
	if err != nil {
		g.fail(w, r, err)
		return
	}
	if p.RefundDue {
		g.log.Warn("payment recorded for refund", zap.Int64("order_id", id), zap.String("payment_id", paymentID), zap.String("status", p.Order.Status))
	}
	httpapi.WriteJSON(w, http.StatusOK, struct {
		orderJSON
		RefundDue bool `json:"refund_due"`
	}{fromRow(p.Order), p.RefundDue})
}

// verifyWebhook checks a webhook's signature (pkg/payment) under
// FLASHSALE_PAYMENT_WEBHOOK_SECRET, its time within
// FLASHSALE_PAYMENT_WEBHOOK_TOLERANCE; the old body-only form passes only
// with FLASHSALE_PAYMENT_WEBHOOK_LEGACY, counted.
func (g *Gateway) verifyWebhook(header string, body []byte) error {
	v := payment.Verifier{Secret: g.cfg.PaymentWebhookSecret, Tolerance: g.cfg.PaymentWebhookTolerance, Legacy: g.cfg.PaymentWebhookLegacy}
	legacy, err := v.Verify(header, body, g.now())
	switch {
	case errors.Is(err, payment.ErrStale):
		return errStaleSignature
	case err != nil:
		return errBadSignature
	case legacy:
		g.metrics.legacyWebhooks.Inc()
	}
	return nil
}

// pendingOut is a pending order as the API shows it.
func pendingOut(p order.Order) orderJSON {
	o := orderJSON{OrderID: httpapi.IDString(p.ID), VoucherID: httpapi.IDString(p.VoucherID), UserID: p.UserID, Quantity: p.Units(),
		Amount: p.Item.Amount, Status: string(order.StatusPending), CreatedAt: p.CreatedAt}
	if p.Entry { // an entry is entered from its 202 on
		o.Status, o.Draw = string(order.StatusEntered), drawEntered
	}
	return o
}
