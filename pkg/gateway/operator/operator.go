// Package operator is the gateway's admin API (/admin/…): creating,
// changing, pausing and reading vouchers, the access codes, a sale's
// report, the order events for pull consumers, the console and its
// figures. The gateway serves it on its public listener or on
// FLASHSALE_ADMIN_ADDR, behind the operator's own bounds (its in-flight
// count and MySQL slots, apart from the buyers'), and hands it what it
// shares with the buyers' API in Gateway.
package operator

import (
	"errors"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/access"
	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/history"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/room"
)

// API is the admin API's handlers and what they read.
type API struct {
	DB *db.Store // the operator's MySQL pool
	// EventsDB is the events readers' MySQL pool (the Reader routes'),
	// apart from the operator's: nil, DB.
	EventsDB *db.Store
	Redis    *rdb.Store
	Rooms    *room.Cache
	Access   *access.Codes
	History  *history.Sampler
	// Refused: the claims this gateway refused, by voucher and reason
	// (the report's refused_claims); Claims: its claims' outcomes.
	Refused *Refusals
	// Unknown: the claims this gateway answered outcome_unknown, and how
	// their late replies resolved, by voucher (the report's
	// outcome_unknown_claims: answered, admitted, refused, lost).
	Unknown *Refusals
	Claims  func() map[string]int64
	Replica string // this gateway's name (its host's)
	Source  string // the events' source (FLASHSALE_EVENTS_SOURCE)
	Now     func() time.Time
	Log     *zap.Logger
	Gateway
}

// Gateway is what the admin API takes from the gateway serving it.
type Gateway struct {
	// Fail answers err (mapped to its code once, for both APIs).
	Fail func(w http.ResponseWriter, r *http.Request, err error)
	// Admin and EventsReader check the request's token (the admin
	// token; or FLASHSALE_EVENTS_READ_TOKEN too), throttling an address
	// that fails too often; when false they have answered.
	Admin, EventsReader func(w http.ResponseWriter, r *http.Request) bool
	// ReadBody reads a body of at most limit bytes within timeout,
	// outside the in-flight count while it waits.
	ReadBody func(w http.ResponseWriter, r *http.Request, limit int64, timeout time.Duration) ([]byte, error)
	// Draw is a draw sale as GET /v1/vouchers/{id}/draw shows it.
	Draw func(r *http.Request, v db.Voucher) (any, error)
	// RoomsChanged: a waiting room was put on or taken away; Restocked:
	// the voucher has units again (this gateway stops pruning its claims).
	RoomsChanged func()
	Restocked    func(voucher int64)
}

// Route is one endpoint of the admin API: under MySQL, its caller's token
// is checked, then it holds one of the operator's MySQL slots (a Reader
// route's: the events readers' own, on a pool of their own), with a
// deadline of Timeout or FLASHSALE_MYSQL_TIMEOUT, whichever is longer.
// Reader routes are open to FLASHSALE_EVENTS_READ_TOKEN too.
type Route struct {
	Method, Pattern string
	MySQL, Reader   bool
	Timeout         time.Duration
	H               http.HandlerFunc
}

// Bounds of the slower routes: a creation writes up to 100,000 items; a
// report's queries read every order of the voucher, once each.
const (
	CreateTimeout = 30 * time.Second
	reportTimeout = 30 * time.Second
	// createBodyTimeout bounds reading a voucher's creation (up to
	// maxCreateBytes), under the listener's ReadTimeout of 10s.
	createBodyTimeout = 8 * time.Second
	// bodyTimeout bounds reading any other body: a few bytes, sent with
	// the headers.
	bodyTimeout = 2 * time.Second
)

// Routes are the admin API's endpoints (api/openapi.yaml lists them).
func (a *API) Routes() []Route {
	return []Route{
		{http.MethodGet, "/admin/v1/vouchers", true, false, 0, a.listVouchers},
		{http.MethodPost, "/admin/v1/vouchers", true, false, CreateTimeout, a.createVoucher},
		{http.MethodGet, "/admin/v1/vouchers/{id}", true, false, 0, a.getVoucher},
		{http.MethodGet, "/admin/v1/vouchers/{id}/report", true, false, reportTimeout, a.voucherReport},
		{http.MethodPatch, "/admin/v1/vouchers/{id}", true, false, 0, a.changeVoucher},
		{http.MethodPost, "/admin/v1/vouchers/{id}/access-codes", true, false, 0, a.issueAccessCodes},
		{http.MethodPost, "/admin/v1/vouchers/{id}/pause", true, false, 0, a.setPaused(true)},
		{http.MethodPost, "/admin/v1/vouchers/{id}/resume", true, false, 0, a.setPaused(false)},
		{http.MethodGet, "/admin/v1/stats", false, false, 0, a.stats},
		{http.MethodGet, "/admin/v1/history", false, false, 0, a.getHistory},
		{http.MethodGet, "/admin/v1/events", true, true, 0, a.listEvents},
		{http.MethodGet, "/admin/v1/events/sinks", true, true, 0, a.listSinks},
		{http.MethodGet, "/admin/console", false, false, 0, serveConsole},
	}
}

// adminAndID checks the admin token and parses the {id}; when it
// returns false it has answered the request.
func (a *API) adminAndID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	if !a.Admin(w, r) {
		return 0, false
	}
	id, err := httpapi.PathID(r)
	if err != nil {
		a.Fail(w, r, err)
		return 0, false
	}
	return id, true
}

// voucherOf reads voucher id, voucher_not_found if none.
func (a *API) voucherOf(r *http.Request, id int64) (db.Voucher, error) {
	v, err := a.DB.Voucher(r.Context(), id)
	if errors.Is(err, db.ErrNotFound) {
		err = httpapi.ErrVoucherMissing
	}
	return v, err
}
