package gateway

import (
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
)

// Request bodies arrive at the client's pace. A client that announces a
// body and sends it slowly (or never) must not hold what honest requests
// need while it waits: every body is read
// through readBody, with a deadline shorter than the listener's
// ReadTimeout, outside the in-flight count, and before any MySQL slot is
// taken by a request that has not proved who sent it (the webhook).
const (
	// bodyReadTimeout bounds reading a body of the user API and the
	// webhook: they are a few bytes, sent with the headers.
	bodyReadTimeout = 2 * time.Second
	// maxWebhookBytes bounds a payment webhook's body: {"order_id",
	// "payment_id"} is under 200 bytes.
	maxWebhookBytes = 4 << 10
)

var errBodyTimeout = httpapi.NewError(http.StatusRequestTimeout, "body_timeout", "the body did not arrive in time")

// readBody reads r's body, at most limit bytes within timeout, once: the
// caller decodes the bytes (httpapi.DecodeBody). A request without a
// body (Content-Length: 0) costs nothing. While it waits for the bytes, the request does not count
// against FLASHSALE_MAX_INFLIGHT (it runs behind shed, which counted it):
// the bound is on work, not on waiting; it counts again once the body is
// in, and is answered 503 overloaded if that finds the gateway full.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request, limit int64, timeout time.Duration) ([]byte, error) {
	if r.ContentLength == 0 {
		return nil, nil
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(timeout)) // unsupported only off a real connection
	inflight, most := g.inflightOf(r)
	inflight.Add(-1)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	full := inflight.Add(1) > most
	var tooBig *http.MaxBytesError
	var netErr net.Error
	switch {
	case errors.As(err, &tooBig):
		return nil, httpapi.BodyTooLarge(limit)
	case errors.As(err, &netErr) && netErr.Timeout():
		return nil, errBodyTimeout
	case err != nil:
		return nil, httpapi.BadRequest("malformed_json", "the body could not be read")
	case full:
		g.metrics.shed.WithLabelValues("overloaded").Inc()
		return nil, errOverloaded
	}
	return body, nil
}
