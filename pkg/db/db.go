package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	gmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/flashsale/flashsale/pkg/draw"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/sale"
)

// Errors of the store.
var (
	ErrNotFound = errors.New("not found")
	// ErrNotPayable means the order failed (it never held a unit), or needs no
	// payment (completed).
	ErrNotPayable = errors.New("order cannot be paid")
	// ErrPaymentExpired means the payment deadline passed (the order is, or is
	// about to be, cancelled).
	ErrPaymentExpired = errors.New("payment deadline passed")
)

// Voucher is a row of vouchers.
type Voucher struct {
	ID                    int64
	Name                  string
	Kind                  string // a kind of pkg/sale
	Stock                 int64  // units not taken by a persisted order
	StockTotal            int64
	StockBuckets          int   // Redis buckets the stock is spread over (1..64)
	TotalAmount           int64 // envelopes: the amount split, in minor units
	MinAmount             int64 // envelopes: the floor of one envelope
	RefundedAmount        int64 // envelopes: what nobody grabbed, refunded once
	RefundedAt            *time.Time
	PerUserLimit          int64
	PerUserDailyLimit     int64 // 0 = none
	StartsAt              *time.Time
	EndsAt                *time.Time
	PaymentTimeoutSeconds int64
	Paused                bool // claims answer 409 paused
	CreatedAt             time.Time
	// Allocation: draw.FirstCome or draw.Draw (pkg/draw). A draw's seed
	// (hex) is secret until DrawState is drawn; its commitment is public.
	Allocation     string
	SeedCommitment string
	DrawSeed       string
	DrawState      string // draw.StateOpen, StateDrawing, StateDrawn; "" for first come
	DrawnAt        *time.Time
	DrawWinners    int64 // entries that won at the draw
	// PowMaxNumber: the difficulty of the proof-of-work gate; 0: none.
	PowMaxNumber int64
	// WaitingRoom: the voucher's waiting room, room.Config.Encode's form;
	// "": none.
	WaitingRoom string
	// Access: its claims and room joins need an access code (pkg/access)
	// while it holds: 0 never, AccessWholeSale for the whole sale, else
	// until this unix millisecond.
	Access int64
	// HotSince: when one of its Redis buckets became hot (pkg/reaper's
	// detector); nil while it is not.
	HotSince *time.Time
	// SplitTo: the buckets a split asked for (more than StockBuckets until
	// the reaper's splitter has done it; 0: none asked); SplitAt: when
	// the last split was done.
	SplitTo int
	SplitAt *time.Time
	// CreationKey: the Idempotency-Key it was created under (unique); nil:
	// none.
	CreationKey *string
}

// Splitting reports a split asked and not yet done.
func (v Voucher) Splitting() bool { return v.SplitTo > v.StockBuckets }

// AccessWholeSale is Voucher.Access when codes are needed for the whole
// sale.
const AccessWholeSale = -1

// IsDraw reports a draw sale.
func (v Voucher) IsDraw() bool { return v.Allocation == draw.Draw }

// Order is a row of orders.
type Order struct {
	ID        int64 `gorm:"primaryKey;autoIncrement:false"`
	VoucherID int64
	UserID    string
	Day       string // the sale-time-zone day (yyyymmdd) the order counted against
	Quantity  int64  // units the order holds
	Item      int64  // the item (envelope, code) it took of a pooled voucher; 0 for units
	Amount    int64  // the envelope's amount
	Code      string // the code
	Status    string
	Reason    string
	CreatedAt time.Time
	ExpiresAt time.Time
	PaidAt    *time.Time
	PaymentID *string // the payment provider's id of the payment
	UpdatedAt time.Time
	// DrawRank is an entry's place in its draw's order (pkg/draw), for
	// the winners and the waitlist's head; Drawn: 1 won at the draw, 2
	// given a unit by the waitlist.
	DrawRank *int64
	Drawn    int
	// PersistedAt: when the order reached MySQL, by MySQL's clock (nil
	// for orders written before migration 0009); never written by us.
	PersistedAt *time.Time `gorm:"->"`
	// ClaimSerial is the serial of the claim that made the order
	// (order.Order's Claim); 0: none.
	ClaimSerial uint64
}

// DefaultIOTimeout bounds one read or write on a MySQL connection when the
// DSN does not (readTimeout, writeTimeout). It is longer than InnoDB's lock
// waits a batch can meet in practice and far shorter than TCP's own give-up.
const DefaultIOTimeout = 15 * time.Second

// Options tune the connection pool.
type Options struct {
	// MaxOpenConns bounds connections per process (default 32).
	MaxOpenConns int
}

// Open connects to MySQL/MariaDB. The DSN is a go-sql-driver DSN; times are
// always read and written in UTC.
func Open(ctx context.Context, dsn string, opts Options) (*gorm.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysql dsn: %w", err)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	// Interpolate arguments client-side: one round trip per statement
	// instead of PREPARE, EXECUTE and CLOSE, which for a batch's multi-row
	// INSERT (hundreds of placeholders) dominated the transaction.
	cfg.InterpolateParams = true
	// No statement may wait on a hung server for ever: without these a
	// stopped mariadbd holds a worker's batch, or a request, until the
	// kernel gives up on the connection. A DSN that sets them wins.
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = DefaultIOTimeout
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = DefaultIOTimeout
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	gdb, err := gorm.Open(gmysql.New(gmysql.Config{DSNConfig: cfg}), &gorm.Config{
		Logger:                 logger.Discard,
		SkipDefaultTransaction: true,
		NowFunc:                func() time.Time { return time.Now().UTC().Truncate(time.Millisecond) },
	})
	if err != nil {
		return nil, fmt.Errorf("open mysql: %w", err)
	}
	sqlDB, err := gdb.DB()
	if err != nil {
		return nil, err
	}
	if opts.MaxOpenConns <= 0 {
		opts.MaxOpenConns = 32
	}
	sqlDB.SetMaxOpenConns(opts.MaxOpenConns)
	sqlDB.SetMaxIdleConns(opts.MaxOpenConns)
	sqlDB.SetConnMaxLifetime(30 * time.Minute)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := sqlDB.PingContext(pctx); err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("ping mysql: %w", err)
	}
	return gdb, nil
}

// Traits are the traits of the voucher's kind of sale.
func (v Voucher) Traits() sale.Traits { return sale.TraitsOf(v.Kind) }

// ItemOf is the item order row o took (zero for units).
func (o Order) ItemOf() order.Item { return order.Item{No: o.Item, Amount: o.Amount, Code: o.Code} }

// Apart opens a pool of its own of n connections on s's database, for
// work that must never wait behind s's (the gateway's operator behind its
// buyers, who may hold every connection of s's pool). s must have been
// opened by Open; the pool has s's plugins.
func (s *Store) Apart(ctx context.Context, n int) (*Store, error) {
	d, ok := s.db.Dialector.(*gmysql.Dialector)
	if !ok || d.Config == nil || d.DSNConfig == nil {
		return nil, errors.New("db: a pool apart needs a store opened by Open")
	}
	g, err := Open(ctx, d.DSNConfig.FormatDSN(), Options{MaxOpenConns: n})
	if err != nil {
		return nil, err
	}
	for _, p := range s.db.Config.Plugins { // tracing, as s's
		if err := g.Use(p); err != nil {
			return nil, errors.Join(err, closeGorm(g))
		}
	}
	return New(g), nil
}

func closeGorm(g *gorm.DB) error {
	sqlDB, err := g.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}
