package gateway

import (
	"errors"
	"net/http"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/room"
)

var (
	errUnauthorized = httpapi.NewError(http.StatusUnauthorized, "unauthorized", "a valid bearer token is required")
	errOrderMissing = httpapi.NewError(http.StatusNotFound, "order_not_found", "no such order")
	errOrderPending = httpapi.NewError(http.StatusConflict, "order_pending", "the order is admitted but not yet persisted; retry shortly")
	errNotPayable   = httpapi.NewError(http.StatusConflict, "order_not_payable", "the order failed, or needs no payment (an envelope grab): it cannot be paid")
	errUnavailable  = httpapi.NewError(http.StatusServiceUnavailable, "unavailable", "the service is temporarily unavailable; retry later")
	errInternal     = httpapi.NewError(http.StatusInternalServerError, "internal", "internal error")
	errRateLimited  = httpapi.NewError(http.StatusTooManyRequests, "rate_limited", "too many requests; retry after Retry-After seconds")
	errOverloaded   = httpapi.NewError(http.StatusServiceUnavailable, "overloaded", "the gateway is overloaded; retry after Retry-After seconds")
)

// errorTable maps every domain error to its answer: the one place where
// errors become HTTP statuses.
var errorTable = []struct {
	err error
	api *httpapi.Error
}{
	{rdb.ErrVoucherNotFound, httpapi.ErrVoucherMissing},
	{rdb.ErrNotStarted, httpapi.NewError(http.StatusConflict, "not_started", "the sale has not started")},
	{rdb.ErrEnded, httpapi.NewError(http.StatusConflict, "ended", "the sale has ended")},
	{rdb.ErrSoldOut, errSoldOut},
	{rdb.ErrUserLimit, httpapi.NewError(http.StatusConflict, "user_limit", "you hold as many of these as a user may")},
	{rdb.ErrDailyLimit, httpapi.NewError(http.StatusConflict, "daily_limit", "you took as many of these today as a user may")},
	{rdb.ErrOverloaded, errUnavailable},
	{rdb.ErrNotLoaded, errUnavailable},
	{rdb.ErrSplitting, errUnavailable},
	{rdb.ErrPastHorizon, errUnavailable},
	{rdb.ErrQuantityAboveLimit, errBadQuantity},
	{db.ErrNotPayable, errNotPayable},
	{db.ErrNotCancellable, errNotCancellable},
	{rdb.ErrPaused, errPaused},
	{rdb.ErrProofRequired, errProofRequired},
	{rdb.ErrProofInvalid, errProofInvalid},
	{rdb.ErrAlreadyEntered, httpapi.NewError(http.StatusConflict, "already_entered", "you have entered this draw already: one entry per user")},
	{rdb.ErrNotAdmitted, errNotAdmitted},
	{rdb.ErrAccessRequired, errAccessRequired},
	{rdb.ErrAccessInvalid, errAccessInvalid},
	{room.ErrNotInQueue, errNotInQueue},
	{room.ErrNoRoom, errNoRoom},
	{room.ErrEnded, errQueueClosed},
	{room.ErrNotOpen, errQueueEarly},
	{room.ErrFull, errQueueFull},
	{db.ErrPaymentExpired, httpapi.NewError(http.StatusConflict, "payment_expired", "the payment deadline has passed")},
}

// toAPIError turns err into its answer. Errors that are no client's fault and
// not in the table come from Redis or MySQL being slow or down: 503.
// errSoldOut is also the answer of a claim pruned in the gateway (pkg/soldout).
var errSoldOut = httpapi.NewError(http.StatusConflict, "sold_out", "sold out")

func toAPIError(err error) *httpapi.Error {
	var ae *httpapi.Error
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
