package gateway

import (
	"cmp"
	crand "crypto/rand"
	"errors"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/draw"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/room"
	"github.com/flashsale/flashsale/pkg/sale"
	"github.com/flashsale/flashsale/pkg/settle"
)

// newRand is a generator seeded from the operating system, for drawing
// envelope amounts nobody can predict.
func newRand() *rand.Rand {
	var seed [32]byte
	_, _ = crand.Read(seed[:]) // never fails on Linux (crypto/rand doc)
	return rand.New(rand.NewChaCha8(seed))
}

// Bounds of a voucher.
const (
	maxBodyBytes = 64 << 10
	// maxCreateBytes bounds the body that creates a voucher: 100,000 codes
	// of 64 characters, quoted, fit.
	maxCreateBytes        = 8 << 20
	maxPerUserLimit       = 1_000
	maxPaymentTimeout     = 7 * 24 * 3600
	defaultPaymentTimeout = 15 * 60
)

type createVoucherRequest struct {
	Name string `json:"name"`
	// Kind is a kind of pkg/sale, and Spec the fields of kinds.
	Kind string `json:"kind"`
	sale.Spec
	PerUserLimit          *int64  `json:"per_user_limit"`
	PerUserDailyLimit     *int64  `json:"per_user_daily_limit"`
	StartsAt              *string `json:"starts_at"`
	EndsAt                *string `json:"ends_at"`
	PaymentTimeoutSeconds *int64  `json:"payment_timeout_seconds"`
	// StockBuckets spreads a hot voucher's stock over Redis buckets
	// (1..64; units only).
	StockBuckets *int64 `json:"stock_buckets"`
	// Allocation: first_come (default) or draw (pkg/draw).
	Allocation *string `json:"allocation"`
	// ProofOfWork puts a proof-of-work gate on its claims (pkg/proof), or
	// on its waiting room's door.
	ProofOfWork *powJSON `json:"proof_of_work"`
	// WaitingRoom puts a waiting room in front of its claims (pkg/room).
	WaitingRoom *room.Config `json:"waiting_room"`
}

// powJSON is a proof-of-work gate: its difficulty, ALTCHA's max number.
type powJSON struct {
	MaxNumber int64 `json:"max_number"`
}

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
	CreatedAt             time.Time  `json:"created_at"`
	Allocation            string     `json:"allocation"`
	// A draw's commitment, from the start, and its seed once drawn.
	SeedCommitment string `json:"seed_commitment,omitempty"`
	Seed           string `json:"seed,omitempty"`
	// ProofOfWork: the gate on claims; null: none.
	ProofOfWork *powJSON `json:"proof_of_work"`
	// WaitingRoom: the room in front of the claims; null: none.
	WaitingRoom *room.Config `json:"waiting_room"`
}

func voucherOut(v db.Voucher) voucherJSON {
	return voucherJSON{ID: idString(v.ID), Name: v.Name, Kind: v.Kind, Stock: v.Stock, StockTotal: v.StockTotal, StockBuckets: max(v.StockBuckets, 1),
		TotalAmount: v.TotalAmount, MinAmount: v.MinAmount,
		PerUserLimit: v.PerUserLimit, PerUserDailyLimit: v.PerUserDailyLimit, StartsAt: v.StartsAt,
		EndsAt: v.EndsAt, PaymentTimeoutSeconds: v.PaymentTimeoutSeconds, Paused: v.Paused, CreatedAt: v.CreatedAt,
		Allocation: cmp.Or(v.Allocation, draw.FirstCome), SeedCommitment: v.SeedCommitment, Seed: revealed(v), ProofOfWork: gateOf(v),
		WaitingRoom: roomOf(v)}
}

// roomOf is v's waiting room, nil without one.
func roomOf(v db.Voucher) *room.Config {
	c, _ := room.Decode(v.WaitingRoom)
	return c
}

// gateOf is v's proof-of-work gate, nil without one.
func gateOf(v db.Voucher) *powJSON {
	if v.PowMaxNumber == 0 {
		return nil
	}
	return &powJSON{MaxNumber: v.PowMaxNumber}
}

// revealed is a draw's seed once it is drawn, "" before (and for a sale
// that is not a draw).
func revealed(v db.Voucher) string {
	if v.DrawState == draw.StateDrawn {
		return v.DrawSeed
	}
	return ""
}

// printable reports whether s, a name people read in the console and in
// reports, holds no control character (category Cc) and no bidirectional
// formatting character: U+202E shows a name reversed, ESC drives a
// terminal that prints it. Names are refused, not cleaned: what is stored
// is what was sent.
func printable(s string) bool {
	for _, r := range s {
		switch {
		case unicode.Is(unicode.Cc, r), r == utf8.RuneError,
			r == '\u061c', r == '\u200e', r == '\u200f', // letter marks
			r >= '\u202a' && r <= '\u202e', r >= '\u2066' && r <= '\u2069': // embeddings, overrides, isolates
			return false
		}
	}
	return true
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

// voucher checks the request and returns the voucher and, for a pooled
// kind, its items, as its kind plans them (pkg/sale).
func (req createVoucherRequest) voucher(now time.Time, rnd *rand.Rand) (db.Voucher, []order.Item, error) {
	v, err := req.common(now)
	if err != nil {
		return v, nil, err
	}
	kind, err := sale.Lookup(req.Kind)
	if err != nil {
		return v, nil, badRequest("invalid_field", "kind must be one of "+strings.Join(sale.Names(), ", "))
	}
	plan, err := sale.Prepare(kind, req.Spec, rnd)
	var fe *sale.FieldError
	switch {
	case errors.As(err, &fe) && fe.Missing:
		return v, nil, badRequest("missing_field", fe.Msg)
	case errors.As(err, &fe):
		return v, nil, badRequest("invalid_field", fe.Msg)
	case err != nil:
		return v, nil, err
	}
	v.Kind, v.Stock, v.StockTotal, v.TotalAmount, v.MinAmount = kind.Name(), plan.Stock, plan.Stock, plan.TotalAmount, plan.MinAmount
	buckets, err := intField("stock_buckets", req.StockBuckets, 1, 1, rdb.MaxBuckets)
	if err != nil {
		return v, nil, err
	}
	if buckets > 1 && !kind.Traits().Spread {
		return v, nil, badRequest("invalid_field", "stock_buckets must be 1 for a "+kind.Name()+" voucher: only a count of units is spread over buckets")
	}
	v.StockBuckets = int(buckets)
	if err := req.allocation(&v, kind); err != nil {
		return v, nil, err
	}
	if req.ProofOfWork != nil {
		if v.PowMaxNumber, err = req.ProofOfWork.difficulty(); err != nil {
			return v, nil, err
		}
	}
	if req.WaitingRoom != nil {
		if v.WaitingRoom, err = waitingRoom(v, req.WaitingRoom); err != nil {
			return v, nil, err
		}
	}
	return v, plan.Items, nil
}

// allocation sets v's allocation; a draw gets its seed and commitment.
func (req createVoucherRequest) allocation(v *db.Voucher, kind sale.Kind) error {
	v.Allocation = draw.FirstCome
	if req.Allocation == nil || *req.Allocation == draw.FirstCome {
		return nil
	}
	if *req.Allocation != draw.Draw {
		return badRequest("invalid_field", "allocation must be first_come or draw")
	}
	switch {
	case kind.Traits().NoPayment:
		return badRequest("invalid_field", "a "+kind.Name()+" voucher cannot be drawn: a draw's winners pay for what they won (units or codes)")
	case v.EndsAt == nil:
		return badRequest("missing_field", "ends_at is required for a draw: the winners are drawn when the entries close")
	case req.PerUserLimit != nil && *req.PerUserLimit != 1:
		return badRequest("invalid_field", "per_user_limit must be 1 for a draw: one entry per user")
	case v.PerUserDailyLimit != 0:
		return badRequest("invalid_field", "per_user_daily_limit must be 0 for a draw")
	case v.StockBuckets > 1:
		return badRequest("invalid_field", "stock_buckets must be 1 for a draw: entries take no stock")
	}
	seed := draw.NewSeed()
	v.Allocation, v.PerUserLimit, v.DrawState = draw.Draw, 1, draw.StateOpen
	v.DrawSeed, v.SeedCommitment = seed.Hex(), seed.Commitment()
	return nil
}

// common checks the fields every kind has.
func (req createVoucherRequest) common(now time.Time) (db.Voucher, error) {
	v := db.Voucher{Name: strings.TrimSpace(req.Name), CreatedAt: now.UTC().Truncate(time.Millisecond)}
	if v.Name == "" || len(v.Name) > 128 {
		return v, badRequest("invalid_field", "name is required, at most 128 bytes")
	}
	if !printable(v.Name) {
		return v, badRequest("invalid_field", "name must be printable text: no control characters (NUL, ESC, newlines) and no bidirectional controls (U+202E), which would show it other than it is")
	}
	var err error
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

// createVoucher: POST /admin/v1/vouchers. Records the voucher and its
// creation in MySQL, then puts it in Redis (pkg/settle); if Redis cannot
// take it now the voucher exists all the same (201) and the reaper puts it
// in Redis as soon as it can: until then its claims answer
// voucher_not_found. (A 503 would invite a retry, and a second voucher.)
func (g *Gateway) createVoucher(w http.ResponseWriter, r *http.Request) {
	if !g.admin(w, r) {
		return
	}
	var req createVoucherRequest
	if _, err := g.readBody(w, r, maxCreateBytes, createBodyTimeout); err != nil {
		g.fail(w, r, err)
		return
	}
	if err := decodeJSONUpTo(w, r, &req, maxCreateBytes); err != nil {
		g.fail(w, r, err)
		return
	}
	now := g.now().UTC()
	v, items, err := req.voucher(now, newRand())
	if err != nil {
		g.fail(w, r, err)
		return
	}
	ctx := r.Context()
	ch, err := g.db.CreateVoucher(ctx, &v, items, now)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	if _, err := settle.Changes(ctx, g.redis, g.db, []db.VoucherChange{ch}, now); err != nil {
		g.log.Warn("voucher created in MySQL; its creation in Redis is left to the reaper", zap.Int64("voucher_id", v.ID), zap.Error(err))
	}
	g.log.Info("voucher created", zap.Int64("voucher_id", v.ID), zap.String("kind", v.Kind), zap.Int64("stock", v.Stock))
	writeJSON(w, http.StatusCreated, voucherOut(v))
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
		a, err := g.db.VoucherAmounts(ctx, id)
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
		out.Stream.Pending += b.Pending
		out.Stream.DeadLetters += b.DeadLetters
	}
	writeJSON(w, http.StatusOK, out)
}
