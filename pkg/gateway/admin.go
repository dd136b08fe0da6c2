package gateway

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// Bounds of a voucher.
const (
	maxBodyBytes          = 64 << 10
	maxStock              = 10_000_000
	maxPerUserLimit       = 1_000
	maxPaymentTimeout     = 7 * 24 * 3600
	defaultPaymentTimeout = 15 * 60
)

type createVoucherRequest struct {
	Name                  string  `json:"name"`
	Stock                 *int64  `json:"stock"`
	PerUserLimit          *int64  `json:"per_user_limit"`
	PerUserDailyLimit     *int64  `json:"per_user_daily_limit"`
	StartsAt              *string `json:"starts_at"`
	EndsAt                *string `json:"ends_at"`
	PaymentTimeoutSeconds *int64  `json:"payment_timeout_seconds"`
}

type voucherJSON struct {
	ID                    string     `json:"id"`
	Name                  string     `json:"name"`
	Stock                 int64      `json:"stock"`
	StockTotal            int64      `json:"stock_total"`
	PerUserLimit          int64      `json:"per_user_limit"`
	PerUserDailyLimit     int64      `json:"per_user_daily_limit"`
	StartsAt              *time.Time `json:"starts_at,omitempty"`
	EndsAt                *time.Time `json:"ends_at,omitempty"`
	PaymentTimeoutSeconds int64      `json:"payment_timeout_seconds"`
	CreatedAt             time.Time  `json:"created_at"`
}

func voucherOut(v db.Voucher) voucherJSON {
	return voucherJSON{ID: idString(v.ID), Name: v.Name, Stock: v.Stock, StockTotal: v.StockTotal,
		PerUserLimit: v.PerUserLimit, PerUserDailyLimit: v.PerUserDailyLimit, StartsAt: v.StartsAt,
		EndsAt: v.EndsAt, PaymentTimeoutSeconds: v.PaymentTimeoutSeconds, CreatedAt: v.CreatedAt}
}

// decodeJSON reads one JSON object of at most maxBodyBytes with no unknown
// fields into dst.
func decodeJSON(w http.ResponseWriter, r *http.Request, dst any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return &apiError{http.StatusUnsupportedMediaType, "unsupported_media_type", "the body must be application/json"}
		}
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
	if err == nil && dec.Decode(&struct{}{}) != io.EOF {
		err = errors.New("trailing data after the JSON object")
	}
	if err == nil {
		return nil
	}
	var tooBig *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &tooBig):
		return errBodyTooLarge
	case errors.As(err, &typeErr):
		return badRequest("invalid_field", "field "+typeErr.Field+" has the wrong type or is out of range")
	case strings.HasPrefix(err.Error(), "json: unknown field"):
		return badRequest("unknown_field", strings.TrimPrefix(err.Error(), "json: "))
	case errors.Is(err, io.EOF):
		return badRequest("malformed_json", "the body is empty")
	default:
		return badRequest("malformed_json", "the body is not a JSON object: "+err.Error())
	}
}

func parseTime(field string, s *string) (*time.Time, error) {
	if s == nil {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339, *s)
	if err != nil {
		return nil, badRequest("invalid_field", field+" must be an RFC 3339 time")
	}
	t = t.UTC().Truncate(time.Millisecond)
	// Redis holds sale times as Unix milliseconds, 0 meaning "none": a
	// time at or before 1970 would read as no bound at all.
	if !t.After(time.Unix(0, 0)) || t.Year() > 9999 {
		return nil, badRequest("invalid_field", field+" must be after 1970-01-01 and before year 10000")
	}
	return &t, nil
}

func intField(field string, v *int64, def, lo, hi int64) (int64, error) {
	if v == nil {
		if def < 0 {
			return 0, badRequest("missing_field", field+" is required")
		}
		return def, nil
	}
	if *v < lo || *v > hi {
		return 0, badRequest("invalid_field", field+" must be between "+idString(lo)+" and "+idString(hi))
	}
	return *v, nil
}

func (req createVoucherRequest) voucher(now time.Time) (db.Voucher, error) {
	v := db.Voucher{Name: strings.TrimSpace(req.Name), CreatedAt: now.UTC().Truncate(time.Millisecond)}
	if v.Name == "" || len(v.Name) > 128 {
		return v, badRequest("invalid_field", "name is required, at most 128 bytes")
	}
	var err error
	if v.StockTotal, err = intField("stock", req.Stock, -1, 1, maxStock); err != nil {
		return v, err
	}
	v.Stock = v.StockTotal
	if v.PerUserLimit, err = intField("per_user_limit", req.PerUserLimit, 1, 1, maxPerUserLimit); err != nil {
		return v, err
	}
	if v.PerUserDailyLimit, err = intField("per_user_daily_limit", req.PerUserDailyLimit, 0, 0, maxPerUserLimit); err != nil {
		return v, err
	}
	if v.PaymentTimeoutSeconds, err = intField("payment_timeout_seconds", req.PaymentTimeoutSeconds, defaultPaymentTimeout, 1, maxPaymentTimeout); err != nil {
		return v, err
	}
	if v.StartsAt, err = parseTime("starts_at", req.StartsAt); err != nil {
		return v, err
	}
	if v.EndsAt, err = parseTime("ends_at", req.EndsAt); err != nil {
		return v, err
	}
	if v.StartsAt != nil && v.EndsAt != nil && !v.EndsAt.After(*v.StartsAt) {
		return v, badRequest("invalid_field", "ends_at must be after starts_at")
	}
	if v.EndsAt != nil && !v.EndsAt.After(now) {
		return v, badRequest("invalid_field", "ends_at must be in the future: this sale would be over before it began")
	}
	return v, nil
}

// createVoucher: POST /admin/v1/vouchers. Writes MySQL, then warms Redis so
// the sale can start; if Redis cannot be warmed the voucher is removed again
// and the answer is 503, so no voucher exists that cannot be sold.
func (g *Gateway) createVoucher(w http.ResponseWriter, r *http.Request) {
	if err := g.auth.admin(r); err != nil {
		g.fail(w, r, err)
		return
	}
	var req createVoucherRequest
	if err := decodeJSON(w, r, &req); err != nil {
		g.fail(w, r, err)
		return
	}
	v, err := req.voucher(g.now())
	if err != nil {
		g.fail(w, r, err)
		return
	}
	ctx := r.Context()
	if err := g.db.CreateVoucher(ctx, &v); err != nil {
		g.fail(w, r, err)
		return
	}
	if err := g.redis.PutVoucher(ctx, v.Admission(v.Stock)); err != nil {
		if derr := g.db.DeleteVoucher(ctx, v.ID); derr != nil {
			err = errors.Join(err, derr)
		}
		g.fail(w, r, err)
		return
	}
	g.log.Info("voucher created", zap.Int64("voucher_id", v.ID), zap.Int64("stock", v.Stock))
	writeJSON(w, http.StatusCreated, voucherOut(v))
}

type voucherStatusJSON struct {
	voucherJSON
	RemainingRedis *int64                 `json:"remaining_redis"`
	RemainingMySQL int64                  `json:"remaining_mysql"`
	Orders         map[order.Status]int64 `json:"orders"`
	Stream         rdb.Backlog            `json:"stream"`
}

// getVoucher: GET /admin/v1/vouchers/{id}: the voucher as both stores see it.
func (g *Gateway) getVoucher(w http.ResponseWriter, r *http.Request) {
	id, ok := g.adminAndID(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	v, err := g.db.Voucher(ctx, id)
	if errors.Is(err, db.ErrNotFound) {
		err = errVoucherMissing
	}
	if err != nil {
		g.fail(w, r, err)
		return
	}
	out := voucherStatusJSON{voucherJSON: voucherOut(v), RemainingMySQL: v.Stock}
	if out.Orders, err = g.db.OrderCounts(ctx, id); err != nil {
		g.fail(w, r, err)
		return
	}
	n, found, err := g.redis.RemainingStock(ctx, id)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	if found {
		out.RemainingRedis = &n
	}
	if out.Stream, err = g.redis.PartitionBacklog(ctx, g.redis.PartitionOf(id)); err != nil {
		g.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
