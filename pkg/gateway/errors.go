package gateway

import (
	"errors"
	"net/http"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/room"
)

// apiError is an error answer: an HTTP status, a stable machine-readable
// code and a message for people.
type apiError struct {
	Status  int    `json:"-"`
	Code    string `json:"error"`
	Message string `json:"message"`
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func badRequest(code, msg string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Code: code, Message: msg}
}

var (
	errUnauthorized   = &apiError{http.StatusUnauthorized, "unauthorized", "a valid bearer token is required"}
	errVoucherMissing = &apiError{http.StatusNotFound, "voucher_not_found", "no such voucher"}
	errOrderMissing   = &apiError{http.StatusNotFound, "order_not_found", "no such order"}
	errOrderPending   = &apiError{http.StatusConflict, "order_pending", "the order is admitted but not yet persisted; retry shortly"}
	errNotPayable     = &apiError{http.StatusConflict, "order_not_payable", "the order failed, or needs no payment (an envelope grab): it cannot be paid"}
	errUnavailable    = &apiError{http.StatusServiceUnavailable, "unavailable", "the service is temporarily unavailable; retry later"}
	errInternal       = &apiError{http.StatusInternalServerError, "internal", "internal error"}
	errRateLimited    = &apiError{http.StatusTooManyRequests, "rate_limited", "too many requests; retry after Retry-After seconds"}
	errOverloaded     = &apiError{http.StatusServiceUnavailable, "overloaded", "the gateway is overloaded; retry after Retry-After seconds"}
)

// errorTable maps every domain error to its answer: the one place where
// errors become HTTP statuses.
var errorTable = []struct {
	err error
	api *apiError
}{
	{rdb.ErrVoucherNotFound, errVoucherMissing},
	{rdb.ErrNotStarted, &apiError{http.StatusConflict, "not_started", "the sale has not started"}},
	{rdb.ErrEnded, &apiError{http.StatusConflict, "ended", "the sale has ended"}},
	{rdb.ErrSoldOut, errSoldOut},
	{rdb.ErrUserLimit, &apiError{http.StatusConflict, "user_limit", "you hold as many of these as a user may"}},
	{rdb.ErrDailyLimit, &apiError{http.StatusConflict, "daily_limit", "you took as many of these today as a user may"}},
	{rdb.ErrOverloaded, errUnavailable},
	{rdb.ErrNotLoaded, errUnavailable},
	{rdb.ErrQuantityAboveLimit, errBadQuantity},
	{db.ErrNotPayable, errNotPayable},
	{db.ErrNotCancellable, errNotCancellable},
	{rdb.ErrPaused, errPaused},
	{rdb.ErrProofRequired, errProofRequired},
	{rdb.ErrProofInvalid, errProofInvalid},
	{rdb.ErrAlreadyEntered, &apiError{http.StatusConflict, "already_entered", "you have entered this draw already: one entry per user"}},
	{rdb.ErrNotAdmitted, errNotAdmitted},
	{rdb.ErrAccessRequired, errAccessRequired},
	{rdb.ErrAccessInvalid, errAccessInvalid},
	{room.ErrNotInQueue, errNotInQueue},
	{room.ErrNoRoom, errNoRoom},
	{room.ErrEnded, errQueueClosed},
	{room.ErrNotOpen, errQueueEarly},
	{room.ErrFull, errQueueFull},
	{db.ErrPaymentExpired, &apiError{http.StatusConflict, "payment_expired", "the payment deadline has passed"}},
}

// toAPIError turns err into its answer. Errors that are no client's fault and
// not in the table come from Redis or MySQL being slow or down: 503.
// errSoldOut is also the answer of a claim pruned in the gateway (pkg/soldout).
var errSoldOut = &apiError{http.StatusConflict, "sold_out", "sold out"}

func toAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	for _, e := range errorTable {
		if errors.Is(err, e.err) {
			return e.api
		}
	}
	return errUnavailable
}
