package gateway

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
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
	// createBodyTimeout bounds reading a voucher's creation (up to
	// maxCreateBytes), under the listener's ReadTimeout of 10s.
	createBodyTimeout = 8 * time.Second
	// maxWebhookBytes bounds a payment webhook's body: {"order_id",
	// "payment_id"} is under 200 bytes.
	maxWebhookBytes = 4 << 10
)

var errBodyTimeout = &apiError{http.StatusRequestTimeout, "body_timeout", "the body did not arrive in time"}

// bodyTooLarge is the answer to a body over limit bytes.
func bodyTooLarge(limit int64) *apiError {
	return &apiError{http.StatusRequestEntityTooLarge, "body_too_large", "the body exceeds " + strconv.FormatInt(limit, 10) + " bytes"}
}

// readBody reads r's body, at most limit bytes within timeout, and puts it
// back on r for decodeJSON. A request without a body (Content-Length: 0)
// costs nothing. While it waits for the bytes, the request does not count
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
		return nil, bodyTooLarge(limit)
	case errors.As(err, &netErr) && netErr.Timeout():
		return nil, errBodyTimeout
	case err != nil:
		return nil, badRequest("malformed_json", "the body could not be read")
	case full:
		g.metrics.shed.WithLabelValues("overloaded").Inc()
		return nil, errOverloaded
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, nil
}

// decodeJSON reads one JSON object of at most maxBodyBytes into dst, as
// encoding/json/v2 reads it: member names match exactly (no "Stock" for
// "stock"), a name may appear once, and an unknown one is refused; so is
// anything after the object. Errors are the API's, with their codes.
func decodeJSON(w http.ResponseWriter, r *http.Request, dst any) error {
	return decodeJSONUpTo(w, r, dst, maxBodyBytes)
}

// decodeJSONUpTo is decodeJSON with a body of at most limit bytes.
func decodeJSONUpTo(w http.ResponseWriter, r *http.Request, dst any, limit int64) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return &apiError{http.StatusUnsupportedMediaType, "unsupported_media_type", "the body must be application/json"}
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return bodyTooLarge(limit)
	case err != nil:
		return badRequest("malformed_json", "the body could not be read")
	case len(bytes.TrimSpace(body)) == 0:
		return badRequest("malformed_json", "the body is empty")
	}
	err = jsonv2.Unmarshal(body, dst, jsonv2.RejectUnknownMembers(true))
	if err == nil {
		return nil
	}
	var semErr *jsonv2.SemanticError
	var synErr *jsontext.SyntacticError
	switch {
	case errors.As(err, &semErr) && errors.Is(semErr.Err, jsonv2.ErrUnknownName):
		return badRequest("unknown_field", "unknown field "+strconv.Quote(semErr.JSONPointer.LastToken())+
			" (names are matched exactly, as the API spells them)")
	case errors.As(err, &synErr) && errors.Is(synErr.Err, jsontext.ErrDuplicateName):
		return badRequest("malformed_json", "the member "+strconv.Quote(synErr.JSONPointer.LastToken())+" appears twice")
	case errors.As(err, &semErr):
		return badRequest("invalid_field", "field "+strings.TrimPrefix(string(semErr.JSONPointer), "/")+" has the wrong type or is out of range")
	default:
		return badRequest("malformed_json", "the body is not a JSON object: "+strings.TrimPrefix(err.Error(), "jsontext: "))
	}
}
