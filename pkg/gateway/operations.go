package gateway

import (
	"errors"
	"net/http"
	"strconv"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/payment"
	"github.com/flashsale/flashsale/pkg/settle"
	"github.com/flashsale/flashsale/pkg/voucher"
)

// Running a sale: the operator pauses and resumes it and lists vouchers;
// a buyer lists and cancels orders; the payment provider confirms
// payments.

var (
	errNotCancellable = &apiError{http.StatusConflict, "order_not_cancellable", "the order is paid, completed or failed: it cannot be cancelled"}
	errPaused         = &apiError{http.StatusConflict, "paused", "the sale is paused; retry later"}
	errBadSignature   = &apiError{http.StatusUnauthorized, "unauthorized", "the X-Flashsale-Signature is not t=<unix seconds>,sha256=<hex HMAC-SHA256 of \"<t>.<body>\">"}
	errStaleSignature = &apiError{http.StatusUnauthorized, "unauthorized", "the X-Flashsale-Signature's time t is outside FLASHSALE_PAYMENT_WEBHOOK_TOLERANCE of now: sign again"}
)

// setPaused: POST /admin/v1/vouchers/{id}/pause and …/resume. Recorded in
// MySQL, then applied to Redis (pkg/settle); if Redis cannot take it now
// the answer is 503 — the change stands in MySQL and the reaper applies it,
// and a retry is harmless (the latest pause or resume wins in Redis).
func (g *Gateway) setPaused(paused bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := g.adminAndID(w, r)
		if !ok {
			return
		}
		ctx := r.Context()
		now := g.now().UTC()
		v, ch, err := g.dbOf(r).SetPaused(ctx, id, paused, now)
		if errors.Is(err, db.ErrNotFound) {
			err = errVoucherMissing
		}
		if err == nil {
			_, err = settle.Changes(ctx, g.redis, g.dbOf(r), []db.VoucherChange{ch}, now)
		}
		if err != nil && !errors.Is(err, settle.ErrCreationOwed) {
			g.fail(w, r, err)
			return
		}
		g.log.Info("voucher paused", zap.Int64("voucher_id", id), zap.Bool("paused", paused))
		writeJSON(w, http.StatusOK, voucherOut(v, g.now()))
	}
}

// Bounds of a page of vouchers.
const (
	pageDefault = 50
	pageMax     = 500
)

// pageOf reads a page's query, ?limit=N&after=K: limit 1 to most (def
// when absent), after a whole number (0 when absent); a bad one is 400
// invalid_field, afterMsg saying what after must be.
func pageOf(r *http.Request, def, most int64, afterMsg string) (limit, after int64, err error) {
	q := r.URL.Query()
	limit = def
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.ParseInt(s, 10, 64); err != nil || limit < 1 || limit > most {
			return 0, 0, badRequest("invalid_field", "limit must be 1 to "+strconv.FormatInt(most, 10))
		}
	}
	if s := q.Get("after"); s != "" {
		if after, err = strconv.ParseInt(s, 10, 64); err != nil || after < 0 {
			return 0, 0, badRequest("invalid_field", afterMsg)
		}
	}
	return limit, after, nil
}

// listVouchers: GET /admin/v1/vouchers?limit=N&after=ID, by id.
func (g *Gateway) listVouchers(w http.ResponseWriter, r *http.Request) {
	if !g.admin(w, r) {
		return
	}
	limit, after, err := pageOf(r, pageDefault, pageMax, "after must be a voucher id")
	if err != nil {
		g.fail(w, r, err)
		return
	}
	vs, err := g.dbOf(r).Vouchers(r.Context(), after, int(limit)+1)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	out := struct {
		Vouchers []voucherJSON `json:"vouchers"`
		Next     *string       `json:"next"`
	}{Vouchers: []voucherJSON{}}
	for i, v := range vs {
		if i == int(limit) {
			next := idString(vs[i-1].ID)
			out.Next = &next
			break
		}
		out.Vouchers = append(out.Vouchers, voucherOut(v, g.now()))
	}
	writeJSON(w, http.StatusOK, out)
}

// voucherParam reads the query's voucher_id: 0 when absent.
func voucherParam(r *http.Request) (int64, error) {
	s := r.URL.Query().Get("voucher_id")
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 {
		return 0, badRequest("invalid_field", "voucher_id must be a voucher id")
	}
	return v, nil
}

// listOrders: GET /v1/orders?voucher_id=ID, the caller's own orders of
// that voucher, pending ones included: how a client finds an order whose
// 202 it never received.
func (g *Gateway) listOrders(w http.ResponseWriter, r *http.Request) {
	user, ok := g.user(w, r)
	if !ok {
		return
	}
	v, err := voucherParam(r)
	if err == nil && v == 0 {
		err = badRequest("missing_field", "voucher_id is required")
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
	writeJSON(w, http.StatusOK, out)
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
	o, rel, err := g.dbOf(r).CancelOrder(ctx, id, user, g.now().UTC())
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
		if _, err := settle.Releases(ctx, g.redis, g.dbOf(r), []db.Release{*rel}, g.now()); err != nil {
			g.log.Warn("release of a cancelled order left to the reaper", zap.Int64("order_id", id), zap.Error(err))
		} else {
			g.soldOut.Admitted(o.VoucherID) // its units are back in Redis
		}
		g.log.Info("order cancelled by its owner", zap.Int64("order_id", id), zap.Int64("voucher_id", o.VoucherID))
	}
	writeJSON(w, http.StatusOK, fromRow(o))
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
		writeError(w, &apiError{http.StatusNotFound, "not_found", "no payment webhook is configured"})
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
	if err := decodeJSON(w, r, &req); err != nil {
		g.fail(w, r, err)
		return
	}
	id, err := strconv.ParseInt(req.OrderID, 10, 64)
	if err != nil || id <= 0 {
		g.fail(w, r, badRequest("invalid_field", "order_id must be an order id (a string of digits)"))
		return
	}
	if !validToken(req.PaymentID) {
		g.fail(w, r, badRequest("invalid_field", "payment_id must be 1-64 characters of A-Z a-z 0-9 _ . @ -"))
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
	writeJSON(w, http.StatusOK, struct {
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
	o := orderJSON{OrderID: idString(p.ID), VoucherID: idString(p.VoucherID), UserID: p.UserID, Quantity: p.Units(),
		Amount: p.Item.Amount, Status: string(order.StatusPending), CreatedAt: p.CreatedAt}
	if p.Entry { // an entry is entered from its 202 on
		o.Status, o.Draw = string(order.StatusEntered), drawEntered
	}
	return o
}

var errDrawClosed = &apiError{http.StatusConflict, "draw_closed", voucher.ErrDrawClosed.Error()}

var errNotToppable = &apiError{http.StatusConflict, "not_toppable", "stock can be added only to a voucher of units"}

// changeVoucher: PATCH /admin/v1/vouchers/{id} with {"add_stock": N}
// and/or {"ends_at": …}. MySQL records the change with the change itself;
// Redis gets it next, exactly once (change.lua). Should Redis not take it
// now, the change is owed and the reaper applies it (pkg/settle): a crash
// between the two stores loses nothing, and a retry of this request is a
// second change, so the answer is 200 either way.
func (g *Gateway) changeVoucher(w http.ResponseWriter, r *http.Request) {
	id, ok := g.adminAndID(w, r)
	if !ok {
		return
	}
	var req voucher.Change
	if _, err := g.readBody(w, r, maxBodyBytes, bodyReadTimeout); err != nil {
		g.fail(w, r, err)
		return
	}
	if err := decodeJSON(w, r, &req); err != nil {
		g.fail(w, r, err)
		return
	}
	now := g.now().UTC()
	edit, err := req.Edit(now)
	if err != nil {
		g.fail(w, r, ruleError(err))
		return
	}
	ctx := r.Context()
	current, err := g.dbOf(r).Voucher(ctx, id)
	if errors.Is(err, db.ErrNotFound) {
		err = errVoucherMissing
	} else if err == nil {
		err = ruleError(req.Against(current, &edit, now))
	}
	if err != nil {
		g.fail(w, r, err)
		return
	}
	v, ch, err := g.dbOf(r).ChangeVoucher(ctx, id, edit, now)
	switch {
	case errors.Is(err, db.ErrNotFound):
		err = errVoucherMissing
	case errors.Is(err, db.ErrNotToppable):
		err = errNotToppable
	}
	if err != nil {
		g.fail(w, r, err)
		return
	}
	if _, err := settle.Changes(ctx, g.redis, g.dbOf(r), []db.VoucherChange{ch}, now); err != nil {
		g.log.Warn("voucher change left to the reaper", zap.Int64("voucher_id", id), zap.Int64("change_id", ch.ID), zap.Error(err))
	} else {
		if edit.AddStock > 0 {
			g.soldOut.Admitted(id) // units are back: this replica stops pruning now, not a refresh later
		}
		if ch.Room != nil {
			g.readRoomIndex() // a room put on or taken away: this replica's polls know it now, others' within roomIndexEvery
		}
	}
	g.log.Info("voucher changed", zap.Int64("voucher_id", id), zap.Int64("add_stock", edit.AddStock), zap.Bool("ends_at_changed", edit.EndsAt != nil))
	writeJSON(w, http.StatusOK, voucherOut(v, g.now()))
}
