// Package httpapi is how the gateway's two APIs, the buyers' and the
// operator's (pkg/gateway/operator), answer: JSON bodies, errors with a
// stable code, and the request's parts both read (a body as JSON, the
// id in the path, a page's query).
package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Error is an error answer: an HTTP status, a stable machine-readable
// code and a message for people.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"error"`
	Message string `json:"message"`
	// Field: the request's field a missing_field or invalid_field names,
	// as the API spells it, for a form to show the message beside it.
	Field string `json:"field,omitempty"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// ErrBadIdempotencyKey answers an Idempotency-Key not of its form, on a
// claim and on a voucher's creation alike.
var ErrBadIdempotencyKey = BadRequest("invalid_idempotency_key", "Idempotency-Key must be 1-64 characters of A-Z a-z 0-9 _ . @ -")

// BadRequest is a 400 answer with code.
func BadRequest(code, msg string) *Error {
	return &Error{Status: http.StatusBadRequest, Code: code, Message: msg}
}

// ErrVoucherMissing answers a voucher id nobody created.
var ErrVoucherMissing = NewError(http.StatusNotFound, "voucher_not_found", "no such voucher")

// JSONContentType and NoStore are header values set by assignment on the
// hot paths (a header map's Set allocates): shared, never changed.
var JSONContentType, NoStore = []string{"application/json"}, []string{"no-store"}

// WriteJSON answers status with v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal","message":"internal error"}`)
	}
	w.Header()["Content-Type"] = JSONContentType
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// WriteError answers e; a 503, or a 429 without one yet, says
// Retry-After: 1.
func WriteError(w http.ResponseWriter, e *Error) {
	if e.Status == http.StatusServiceUnavailable || (e.Status == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "") {
		w.Header().Set("Retry-After", "1")
	}
	WriteJSON(w, e.Status, e)
}

// MaxBodyBytes bounds a request body unless a route says otherwise.
const MaxBodyBytes = 64 << 10

// BodyTooLarge is the answer to a body over limit bytes.
func BodyTooLarge(limit int64) *Error {
	return NewError(http.StatusRequestEntityTooLarge, "body_too_large", "the body exceeds "+strconv.FormatInt(limit, 10)+" bytes")
}

// DecodeJSON reads r's body, at most limit bytes, and decodes it into
// dst as DecodeBody does.
func DecodeJSON(w http.ResponseWriter, r *http.Request, dst any, limit int64) error {
	if err := jsonContent(r); err != nil {
		return err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return BodyTooLarge(limit)
	case err != nil:
		return BadRequest("malformed_json", "the body could not be read")
	}
	return DecodeBody(r, body, dst)
}

// jsonContent refuses a Content-Type other than application/json (none
// is taken as JSON).
func jsonContent(r *http.Request) error {
	if ct := HeaderValue(r, "Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return NewError(http.StatusUnsupportedMediaType, "unsupported_media_type", "the body must be application/json")
		}
	}
	return nil
}

// DecodeBody decodes body, r's body already read, into dst: one JSON
// object as encoding/json/v2 reads it. Member names match exactly (no
// "Stock" for "stock"), a name may appear once, and an unknown one is
// refused; so is anything after the object. Errors are the API's, with
// their codes.
func DecodeBody(r *http.Request, body []byte, dst any) error {
	if err := jsonContent(r); err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return BadRequest("malformed_json", "the body is empty")
	}
	err := jsonv2.Unmarshal(body, dst, jsonv2.RejectUnknownMembers(true))
	if err == nil {
		return nil
	}
	var semErr *jsonv2.SemanticError
	var synErr *jsontext.SyntacticError
	switch {
	case errors.As(err, &semErr) && errors.Is(semErr.Err, jsonv2.ErrUnknownName):
		return BadRequest("unknown_field", "unknown field "+strconv.Quote(semErr.JSONPointer.LastToken())+
			" (names are matched exactly, as the API spells them)")
	case errors.As(err, &synErr) && errors.Is(synErr.Err, jsontext.ErrDuplicateName):
		return BadRequest("malformed_json", "the member "+strconv.Quote(synErr.JSONPointer.LastToken())+" appears twice")
	case errors.As(err, &semErr):
		return BadRequest("invalid_field", "field "+strings.TrimPrefix(string(semErr.JSONPointer), "/")+" has the wrong type or is out of range")
	default:
		return BadRequest("malformed_json", "the body is not a JSON object: "+strings.TrimPrefix(err.Error(), "jsontext: "))
	}
}

// PathID parses the {id} path segment: a positive decimal id.
func PathID(r *http.Request) (int64, error) { return ParseID(r.PathValue("id")) }

// ParseID reads an id of the path.
func ParseID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 || len(s) > 20 || s[0] == '+' {
		return 0, BadRequest("invalid_id", "the id in the path must be a positive decimal integer")
	}
	return id, nil
}

// IDString is an id as the API writes it: a decimal string (JavaScript's
// numbers hold 53 bits).
func IDString(id int64) string { return strconv.FormatInt(id, 10) }

// PageOf reads a page's query, ?limit=N&after=K: limit 1 to most (def
// when absent), after a whole number (0 when absent); a bad one is 400
// invalid_field, afterMsg saying what after must be.
func PageOf(r *http.Request, def, most int64, afterMsg string) (limit, after int64, err error) {
	q := r.URL.Query()
	limit = def
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.ParseInt(s, 10, 64); err != nil || limit < 1 || limit > most {
			return 0, 0, BadRequest("invalid_field", "limit must be 1 to "+strconv.FormatInt(most, 10))
		}
	}
	if s := q.Get("after"); s != "" {
		if after, err = strconv.ParseInt(s, 10, 64); err != nil || after < 0 {
			return 0, 0, BadRequest("invalid_field", afterMsg)
		}
	}
	return limit, after, nil
}

// VoucherParam reads the query's voucher_id: 0 when absent.
func VoucherParam(r *http.Request) (int64, error) {
	s := r.URL.Query().Get("voucher_id")
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 {
		return 0, BadRequest("invalid_field", "voucher_id must be a voucher id")
	}
	return v, nil
}

// ValidUser reports whether s may be a user id: 1-64 characters of A-Z
// a-z 0-9 _ . @ -.
func ValidUser(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '@' || c == '-') {
			return false
		}
	}
	return true
}

// NewError is an answer of status with code and msg.
func NewError(status int, code, msg string) *Error {
	return &Error{Status: status, Code: code, Message: msg}
}

// HeaderValue is r's first value of the header key, which must be in
// canonical form (http.CanonicalHeaderKey(key) == key, held by a test for
// the keys the gateway reads): net/http files a request's headers under
// their canonical keys, so a lookup by one needs none of Header.Get's
// canonicalisation, which a claim would pay for each header it reads.
func HeaderValue(r *http.Request, key string) string {
	if v := r.Header[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}
