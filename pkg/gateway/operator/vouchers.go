package operator

import (
	"context"
	"errors"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/room"
	"github.com/flashsale/flashsale/pkg/sale"
	"github.com/flashsale/flashsale/pkg/settle"
	"github.com/flashsale/flashsale/pkg/voucher"
)

// maxCreateBytes bounds the body that creates a voucher: 100,000 codes
// of 64 characters, quoted, fit.
const maxCreateBytes = 8 << 20

type voucherJSON struct {
	ID                    string     `json:"id"`
	Name                  string     `json:"name"`
	Kind                  string     `json:"kind"`
	Stock                 int64      `json:"stock"`
	StockTotal            int64      `json:"stock_total"`
	StockBuckets          int        `json:"stock_buckets"`
	TotalAmount           int64      `json:"total_amount,omitempty"`
	MinAmount             int64      `json:"min_amount,omitempty"`
	PerUserLimit          int64      `json:"per_user_limit"`
	PerUserDailyLimit     int64      `json:"per_user_daily_limit"`
	StartsAt              *time.Time `json:"starts_at,omitempty"`
	EndsAt                *time.Time `json:"ends_at,omitempty"`
	PaymentTimeoutSeconds int64      `json:"payment_timeout_seconds"`
	Paused                bool       `json:"paused"`
	// State is where the sale stands (voucher.State): scheduled, on_sale,
	// paused, sold_out or ended.
	State      string    `json:"state"`
	CreatedAt  time.Time `json:"created_at"`
	Allocation string    `json:"allocation"`
	// A draw's commitment, from the start, and its seed once drawn.
	SeedCommitment string `json:"seed_commitment,omitempty"`
	Seed           string `json:"seed,omitempty"`
	// ProofOfWork: the gate on claims; null: none.
	ProofOfWork *voucher.Gate `json:"proof_of_work"`
	// WaitingRoom: the room in front of the claims; null: none.
	WaitingRoom *room.Config `json:"waiting_room"`
	// Access: the access codes its claims need; null: none.
	Access *voucher.Access `json:"access"`
	// HotSince: when it became hot (the reaper's detector); absent while
	// it is not.
	HotSince *time.Time `json:"hot_since,omitempty"`
	// SplitTo: the buckets a split under way is raising stock_buckets to;
	// absent when none is. SplitAt: when its buckets were last split.
	SplitTo int        `json:"split_to,omitempty"`
	SplitAt *time.Time `json:"split_at,omitempty"`
}

func voucherOut(v db.Voucher, now time.Time) voucherJSON {
	return voucherJSON{ID: httpapi.IDString(v.ID), Name: v.Name, Kind: v.Kind, Stock: v.Stock, StockTotal: v.StockTotal, StockBuckets: max(v.StockBuckets, 1),
		TotalAmount: v.TotalAmount, MinAmount: v.MinAmount,
		PerUserLimit: v.PerUserLimit, PerUserDailyLimit: v.PerUserDailyLimit, StartsAt: v.StartsAt,
		EndsAt: v.EndsAt, PaymentTimeoutSeconds: v.PaymentTimeoutSeconds, Paused: v.Paused, State: voucher.State(v, now), CreatedAt: v.CreatedAt,
		Allocation: voucher.Allocation(v), SeedCommitment: v.SeedCommitment, Seed: voucher.Revealed(v), ProofOfWork: voucher.GateOf(v),
		WaitingRoom: voucher.RoomOf(v), Access: voucher.AccessOf(v), HotSince: v.HotSince,
		SplitTo: splitTo(v), SplitAt: v.SplitAt}
}

// splitTo is v's split under way (0: none).
func splitTo(v db.Voucher) int {
	if v.Splitting() {
		return v.SplitTo
	}
	return 0
}

// ruleError is the API's answer to a refusal of pkg/voucher or pkg/sale:
// 400 missing_field or invalid_field, 409 draw_closed.
func ruleError(err error) error {
	var fe *sale.FieldError
	switch {
	case errors.As(err, &fe):
		e := httpapi.BadRequest("invalid_field", fe.Msg)
		if fe.Missing {
			e.Code = "missing_field"
		}
		e.Field = fe.Field
		return e
	case errors.Is(err, voucher.ErrDrawClosed):
		return errDrawClosed
	}
	return err
}

// createVoucher: POST /admin/v1/vouchers. Records the voucher and its
// creation in MySQL, then puts it in Redis (pkg/settle); if Redis cannot
// take it now the voucher exists all the same (201) and the reaper puts it
// in Redis as soon as it can: until then its claims answer
// voucher_not_found. (A 503 would invite a retry, and a second voucher.)
// With an Idempotency-Key, a creation sent again answers 200 and the
// voucher the first made, whatever its body: one sale however often it is
// sent.
func (a *API) createVoucher(w http.ResponseWriter, r *http.Request) {
	if !a.Admin(w, r) {
		return
	}
	var req voucher.Request
	body, err := a.ReadBody(w, r, maxCreateBytes, createBodyTimeout)
	if err != nil {
		a.Fail(w, r, err)
		return
	}
	if err := httpapi.DecodeBody(r, body, &req); err != nil {
		a.Fail(w, r, err)
		return
	}
	key := httpapi.HeaderValue(r, "Idempotency-Key")
	if key != "" && !httpapi.ValidUser(key) {
		a.Fail(w, r, httpapi.ErrBadIdempotencyKey)
		return
	}
	now := a.Now().UTC()
	v, items, err := req.Create(now, voucher.NewRand())
	if err != nil {
		a.Fail(w, r, ruleError(err))
		return
	}
	if key != "" {
		v.CreationKey = &key
	}
	ctx := r.Context()
	ch, err := a.DB.CreateVoucher(ctx, &v, items, db.ActorAdmin, now)
	if errors.Is(err, db.ErrCreatedBefore) { // sent again: the voucher it made, as it is now
		httpapi.WriteJSON(w, http.StatusOK, voucherOut(v, a.Now()))
		return
	}
	if err != nil {
		a.Fail(w, r, err)
		return
	}
	if _, err := settle.Changes(ctx, a.Redis, a.DB, []db.VoucherChange{ch}, now); err != nil {
		a.Log.Warn("voucher created in MySQL; its creation in Redis is left to the reaper", zap.Int64("voucher_id", v.ID), zap.Error(err))
	} else {
		a.RoomsChanged() // its polls here know it at once; elsewhere, with the next read of the rooms' index
	}
	voucher.LogActions(a.Log, ch.Actions)
	httpapi.WriteJSON(w, http.StatusCreated, voucherOut(v, a.Now()))
}

type voucherStatusJSON struct {
	voucherJSON
	RemainingRedis *int64 `json:"remaining_redis"`
	RemainingMySQL int64  `json:"remaining_mysql"`
	// Envelopes: the money in envelopes nobody holds, and what was refunded
	// to the sender when the sale was over.
	RemainingAmount *int64                 `json:"remaining_amount,omitempty"`
	RefundedAmount  *int64                 `json:"refunded_amount,omitempty"`
	Orders          map[order.Status]int64 `json:"orders"`
	// Stream sums Streams, the backlog of every stream the voucher's
	// orders go to (one per bucket's partition; its partition is the
	// voucher's home). A partition's figures count every voucher in it.
	Stream  rdb.Backlog   `json:"stream"`
	Streams []rdb.Backlog `json:"streams"`
	// Draw: a draw sale's state (as GET /v1/vouchers/{id}/draw).
	Draw any `json:"draw,omitempty"`
	// Room: a waiting room's figures, from its state in Redis.
	Room *roomJSON `json:"room,omitempty"`
	// BucketsByMaster: on a cluster, the buckets each master the
	// voucher's partitions reach holds.
	BucketsByMaster map[string]int `json:"buckets_by_master,omitempty"`
	// History: the last historyShown actions on the voucher, newest
	// first: who did what, the fields before and after.
	History []actionJSON `json:"history"`
}

// historyShown bounds the voucher's history in GET /admin/v1/vouchers/{id}.
const historyShown = 50

type actionJSON struct {
	At     time.Time `json:"at"`
	By     string    `json:"by"`
	Action string    `json:"action"`
	Before string    `json:"before,omitempty"`
	After  string    `json:"after"`
}

type roomJSON struct {
	Waiting           int64 `json:"waiting"`
	Admitted          int64 `json:"admitted"`
	PassesOutstanding int64 `json:"passes_outstanding"`
}

// getVoucher: GET /admin/v1/vouchers/{id}: the voucher as both stores see it.
func (a *API) getVoucher(w http.ResponseWriter, r *http.Request) {
	id, ok := a.adminAndID(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	v, err := a.voucherOf(r, id)
	if err != nil {
		a.Fail(w, r, err)
		return
	}
	out := voucherStatusJSON{voucherJSON: voucherOut(v, a.Now()), RemainingMySQL: v.Stock}
	if out.Orders, err = a.DB.OrderCounts(ctx, id); err != nil {
		a.Fail(w, r, err)
		return
	}
	actions, err := a.DB.VoucherActions(ctx, id, historyShown)
	if err != nil {
		a.Fail(w, r, err)
		return
	}
	out.History = make([]actionJSON, len(actions))
	for i, ac := range actions {
		out.History[i] = actionJSON{At: ac.At, By: string(ac.Actor), Action: ac.Action, Before: ac.Before, After: ac.After}
	}
	if v.IsDraw() {
		if out.Draw, err = a.Draw(r, v); err != nil {
			a.Fail(w, r, err)
			return
		}
	}
	if v.WaitingRoom != "" {
		s, err := a.Rooms.Store().Tick(ctx, id, a.Now())
		switch {
		case err == nil:
			out.Room = &roomJSON{Waiting: s.Waiting(), Admitted: s.Front, PassesOutstanding: s.Live}
		case !errors.Is(err, room.ErrNoRoom) && !errors.Is(err, rdb.ErrVoucherNotFound): // Redis has not caught up yet
			a.Fail(w, r, err)
			return
		}
	}
	if v.Traits().Amounts {
		amounts, err := a.DB.VoucherAmounts(ctx, id)
		if err != nil {
			a.Fail(w, r, err)
			return
		}
		out.RemainingAmount, out.RefundedAmount = &amounts.Remaining, &v.RefundedAmount
	}
	n, found, err := a.Redis.RemainingStock(ctx, id)
	if err != nil {
		a.Fail(w, r, err)
		return
	}
	if found {
		out.RemainingRedis = &n
	}
	if out.Streams, err = a.Redis.VoucherBacklog(ctx, id); err != nil {
		a.Fail(w, r, err)
		return
	}
	out.Stream.Partition = a.Redis.PartitionOf(id)
	sp, err := a.Redis.BucketSpread(ctx, id, max(v.StockBuckets, 1), 1)
	if err != nil {
		a.Fail(w, r, err)
		return
	}
	if sp != nil {
		out.BucketsByMaster = sp.ByMaster
	}
	for _, b := range out.Streams {
		out.Stream.Length += b.Length
		out.Stream.Orders += b.Orders
		out.Stream.Pending += b.Pending
		out.Stream.DeadLetters += b.DeadLetters
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
}

// setPaused: POST /admin/v1/vouchers/{id}/pause and …/resume. Recorded in
// MySQL, then applied to Redis (pkg/settle); if Redis cannot take it now
// the answer is 503 — the change stands in MySQL and the reaper applies it,
// and a retry is harmless (the latest pause or resume wins in Redis).
func (a *API) setPaused(paused bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, ok := a.adminAndID(w, r)
		if !ok {
			return
		}
		ctx := r.Context()
		now := a.Now().UTC()
		v, ch, err := a.DB.SetPaused(ctx, id, paused, db.ActorAdmin, now)
		if errors.Is(err, db.ErrNotFound) {
			err = httpapi.ErrVoucherMissing
		}
		if err == nil {
			_, err = settle.Changes(ctx, a.Redis, a.DB, []db.VoucherChange{ch}, now)
		}
		voucher.LogActions(a.Log, ch.Actions) // recorded in MySQL, whatever Redis says
		if err != nil && !settle.Later(err) {
			a.Fail(w, r, err)
			return
		}
		httpapi.WriteJSON(w, http.StatusOK, voucherOut(v, a.Now()))
	}
}

// Bounds of a page of vouchers.
const (
	pageDefault = 50
	pageMax     = 500
)

// listVouchers: GET /admin/v1/vouchers?limit=N&after=ID, by id.
func (a *API) listVouchers(w http.ResponseWriter, r *http.Request) {
	if !a.Admin(w, r) {
		return
	}
	limit, after, err := httpapi.PageOf(r, pageDefault, pageMax, "after must be a voucher id")
	if err != nil {
		a.Fail(w, r, err)
		return
	}
	vs, err := a.DB.Vouchers(r.Context(), after, int(limit)+1)
	if err != nil {
		a.Fail(w, r, err)
		return
	}
	out := struct {
		Vouchers []voucherJSON `json:"vouchers"`
		Next     *string       `json:"next"`
	}{Vouchers: []voucherJSON{}}
	for i, v := range vs {
		if i == int(limit) {
			next := httpapi.IDString(vs[i-1].ID)
			out.Next = &next
			break
		}
		out.Vouchers = append(out.Vouchers, voucherOut(v, a.Now()))
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
}

var errDrawClosed = httpapi.NewError(http.StatusConflict, "draw_closed", voucher.ErrDrawClosed.Error())

var errNotToppable = httpapi.NewError(http.StatusConflict, "not_toppable", "stock can be added only to a voucher of units")

// changeVoucher: PATCH /admin/v1/vouchers/{id} with {"add_stock": N}
// and/or {"ends_at": …}. MySQL records the change with the change itself;
// Redis gets it next, exactly once (change.lua). Should Redis not take it
// now, the change is owed and the reaper applies it (pkg/settle): a crash
// between the two stores loses nothing, and a retry of this request is a
// second change, so the answer is 200 either way.
func (a *API) changeVoucher(w http.ResponseWriter, r *http.Request) {
	id, ok := a.adminAndID(w, r)
	if !ok {
		return
	}
	var req voucher.Change
	body, err := a.ReadBody(w, r, httpapi.MaxBodyBytes, bodyTimeout)
	if err != nil {
		a.Fail(w, r, err)
		return
	}
	if err := httpapi.DecodeBody(r, body, &req); err != nil {
		a.Fail(w, r, err)
		return
	}
	now := a.Now().UTC()
	edit, err := req.Edit(now)
	if err != nil {
		a.Fail(w, r, ruleError(err))
		return
	}
	ctx := r.Context()
	current, err := a.voucherOf(r, id)
	if err == nil {
		err = ruleError(req.Against(current, &edit, now))
	}
	if err != nil {
		a.Fail(w, r, err)
		return
	}
	// The whole PATCH is decided before anything is written: a split asked
	// with other fields is checked against the voucher as they leave it,
	// and asked in their transaction; the locked row decides again
	// (voucher.Consistent), so a concurrent change cannot slip between.
	var to int64
	if req.StockBuckets != nil {
		to = *req.StockBuckets
		if err := ruleError(voucher.Split(edited(current, edit), to, now)); err != nil {
			a.Fail(w, r, err)
			return
		}
		if err := a.evenSpread(ctx, current, to); err != nil {
			a.Fail(w, r, err)
			return
		}
	}
	v := current
	if req.Other() {
		edit.SplitTo = int(to)
		edit.Check = func(v db.Voucher) error { return voucher.Consistent(v, to, now) }
		edit.By = db.ActorAdmin
		if v, err = a.applyChange(ctx, id, edit, now); err != nil {
			a.Fail(w, r, ruleError(err))
			return
		}
	}
	if req.StockBuckets != nil && !req.Other() {
		var actions []db.Action
		v, actions, err = a.DB.AskSplit(ctx, id, int(to), db.ActorAdmin, func(v db.Voucher) error { return voucher.Split(v, to, now) })
		if errors.Is(err, db.ErrNotFound) {
			err = httpapi.ErrVoucherMissing
		}
		if err != nil {
			a.Fail(w, r, ruleError(err))
			return
		}
		voucher.LogActions(a.Log, actions)
	}
	httpapi.WriteJSON(w, http.StatusOK, voucherOut(v, a.Now()))
}

// evenSpread refuses a split of v to to that would not share a cluster's
// masters evenly (voucher.Spread); a split under way to to is not asked
// again, and one Redis has one thread for every bucket.
func (a *API) evenSpread(ctx context.Context, v db.Voucher, to int64) error {
	if a.Redis == nil || (v.Splitting() && int64(v.SplitTo) == to) {
		return nil
	}
	sp, err := a.Redis.BucketSpread(ctx, v.ID, int(to), max(v.StockBuckets, 1))
	if err != nil {
		return err
	}
	return ruleError(voucher.Spread(to, sp))
}

// edited is voucher v as edit leaves it, for the rules that read more
// than one field (a split and a room).
func edited(v db.Voucher, e db.Edit) db.Voucher {
	if e.Room != nil {
		v.WaitingRoom = *e.Room
		if v.WaitingRoom == "0" {
			v.WaitingRoom = ""
		}
	}
	if e.EndsAt != nil {
		v.EndsAt = e.EndsAt
	}
	return v
}

// applyChange records edit of voucher id in MySQL and gives it to Redis
// (or leaves it owed to the reaper).
func (a *API) applyChange(ctx context.Context, id int64, edit db.Edit, now time.Time) (db.Voucher, error) {
	v, ch, err := a.DB.ChangeVoucher(ctx, id, edit, now)
	switch {
	case errors.Is(err, db.ErrNotFound):
		err = httpapi.ErrVoucherMissing
	case errors.Is(err, db.ErrNotToppable):
		err = errNotToppable
	}
	if err != nil {
		return v, err
	}
	voucher.LogActions(a.Log, ch.Actions)
	if _, err := settle.Changes(ctx, a.Redis, a.DB, []db.VoucherChange{ch}, now); err != nil {
		a.Log.Warn("voucher change left to the reaper", zap.Int64("voucher_id", id), zap.Int64("change_id", ch.ID), zap.Error(err))
	} else {
		if edit.AddStock > 0 {
			a.Restocked(id) // units are back: this replica stops pruning now, not a refresh later
		}
		if ch.Room != nil {
			a.RoomsChanged() // a room put on or taken away: this replica's polls know it now, others' within roomIndexEvery
		}
	}
	return v, nil
}
