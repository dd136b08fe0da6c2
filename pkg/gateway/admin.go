package gateway

import (
	"errors"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/room"
	"github.com/flashsale/flashsale/pkg/sale"
	"github.com/flashsale/flashsale/pkg/settle"
	"github.com/flashsale/flashsale/pkg/voucher"
)

// Bounds of a request body.
const (
	maxBodyBytes = 64 << 10
	// maxCreateBytes bounds the body that creates a voucher: 100,000 codes
	// of 64 characters, quoted, fit.
	maxCreateBytes = 8 << 20
)

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
}

func voucherOut(v db.Voucher, now time.Time) voucherJSON {
	return voucherJSON{ID: idString(v.ID), Name: v.Name, Kind: v.Kind, Stock: v.Stock, StockTotal: v.StockTotal, StockBuckets: max(v.StockBuckets, 1),
		TotalAmount: v.TotalAmount, MinAmount: v.MinAmount,
		PerUserLimit: v.PerUserLimit, PerUserDailyLimit: v.PerUserDailyLimit, StartsAt: v.StartsAt,
		EndsAt: v.EndsAt, PaymentTimeoutSeconds: v.PaymentTimeoutSeconds, Paused: v.Paused, State: voucher.State(v, now), CreatedAt: v.CreatedAt,
		Allocation: voucher.Allocation(v), SeedCommitment: v.SeedCommitment, Seed: voucher.Revealed(v), ProofOfWork: voucher.GateOf(v),
		WaitingRoom: voucher.RoomOf(v), Access: voucher.AccessOf(v)}
}

// ruleError is the API's answer to a refusal of pkg/voucher or pkg/sale:
// 400 missing_field or invalid_field, 409 draw_closed.
func ruleError(err error) error {
	var fe *sale.FieldError
	switch {
	case errors.As(err, &fe) && fe.Missing:
		return badRequest("missing_field", fe.Msg)
	case errors.As(err, &fe):
		return badRequest("invalid_field", fe.Msg)
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
func (g *Gateway) createVoucher(w http.ResponseWriter, r *http.Request) {
	if !g.admin(w, r) {
		return
	}
	var req voucher.Request
	if _, err := g.readBody(w, r, maxCreateBytes, createBodyTimeout); err != nil {
		g.fail(w, r, err)
		return
	}
	if err := decodeJSONUpTo(w, r, &req, maxCreateBytes); err != nil {
		g.fail(w, r, err)
		return
	}
	now := g.now().UTC()
	v, items, err := req.Create(now, voucher.NewRand())
	if err != nil {
		g.fail(w, r, ruleError(err))
		return
	}
	ctx := r.Context()
	ch, err := g.dbOf(r).CreateVoucher(ctx, &v, items, now)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	if _, err := settle.Changes(ctx, g.redis, g.dbOf(r), []db.VoucherChange{ch}, now); err != nil {
		g.log.Warn("voucher created in MySQL; its creation in Redis is left to the reaper", zap.Int64("voucher_id", v.ID), zap.Error(err))
	} else {
		g.readRoomIndex() // its polls here know it at once; elsewhere, within room.IndexAgain of the first
	}
	g.log.Info("voucher created", zap.Int64("voucher_id", v.ID), zap.String("kind", v.Kind), zap.Int64("stock", v.Stock))
	writeJSON(w, http.StatusCreated, voucherOut(v, g.now()))
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
	Draw *drawJSON `json:"draw,omitempty"`
	// Room: a waiting room's figures, from its state in Redis.
	Room *roomJSON `json:"room,omitempty"`
}

type roomJSON struct {
	Waiting           int64 `json:"waiting"`
	Admitted          int64 `json:"admitted"`
	PassesOutstanding int64 `json:"passes_outstanding"`
}

// getVoucher: GET /admin/v1/vouchers/{id}: the voucher as both stores see it.
func (g *Gateway) getVoucher(w http.ResponseWriter, r *http.Request) {
	id, ok := g.adminAndID(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	v, err := g.dbOf(r).Voucher(ctx, id)
	if errors.Is(err, db.ErrNotFound) {
		err = errVoucherMissing
	}
	if err != nil {
		g.fail(w, r, err)
		return
	}
	out := voucherStatusJSON{voucherJSON: voucherOut(v, g.now()), RemainingMySQL: v.Stock}
	if out.Orders, err = g.dbOf(r).OrderCounts(ctx, id); err != nil {
		g.fail(w, r, err)
		return
	}
	if v.IsDraw() {
		if out.Draw, err = g.drawOf(r, v); err != nil {
			g.fail(w, r, err)
			return
		}
	}
	if v.WaitingRoom != "" {
		s, err := g.rooms.Store().Tick(ctx, id, g.now())
		switch {
		case err == nil:
			out.Room = &roomJSON{Waiting: s.Waiting(), Admitted: s.Front, PassesOutstanding: s.Live}
		case !errors.Is(err, room.ErrNoRoom) && !errors.Is(err, rdb.ErrVoucherNotFound): // Redis has not caught up yet
			g.fail(w, r, err)
			return
		}
	}
	if v.Traits().Amounts {
		a, err := g.dbOf(r).VoucherAmounts(ctx, id)
		if err != nil {
			g.fail(w, r, err)
			return
		}
		out.RemainingAmount, out.RefundedAmount = &a.Remaining, &v.RefundedAmount
	}
	n, found, err := g.redis.RemainingStock(ctx, id)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	if found {
		out.RemainingRedis = &n
	}
	if out.Streams, err = g.redis.VoucherBacklog(ctx, id); err != nil {
		g.fail(w, r, err)
		return
	}
	out.Stream.Partition = g.redis.PartitionOf(id)
	for _, b := range out.Streams {
		out.Stream.Length += b.Length
		out.Stream.Orders += b.Orders
		out.Stream.Pending += b.Pending
		out.Stream.DeadLetters += b.DeadLetters
	}
	writeJSON(w, http.StatusOK, out)
}
