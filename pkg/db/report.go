package db

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/flashsale/flashsale/pkg/order"
)

// Report is the account of one voucher's sale that MySQL can give: every
// figure is read from the rows the pipeline wrote (orders, releases,
// voucher_changes, late_payments, items), so any process with read access
// computes the same one. docs/RUNBOOK.md ("The report of a sale") says how each is defined.
type Report struct {
	// OpenedAt: when claims were first allowed (starts_at, else the
	// voucher's creation).
	OpenedAt time.Time  `json:"opened_at"`
	EndsAt   *time.Time `json:"ends_at,omitempty"`
	// FirstAdmissionAt and LastAdmissionAt: the first and last order
	// admitted (the gateway's clock at admission).
	FirstAdmissionAt *time.Time `json:"first_admission_at"`
	LastAdmissionAt  *time.Time `json:"last_admission_at"`
	// SoldOutAt: the first admission after which no unit was left in
	// Redis, counting units given back (releases, top-ups) from when Redis
	// got them; nil if it never sold out. TimeToSellOutMS is from OpenedAt.
	SoldOutAt       *time.Time `json:"sold_out_at"`
	TimeToSellOutMS *int64     `json:"time_to_sell_out_ms"`

	// StockBuckets: the Redis buckets its stock is spread over now;
	// SplitAt: when they were last split while it sold (the reaper's
	// splitter), HotSince when it was marked hot (the detector), each
	// absent if never.
	StockBuckets int        `json:"stock_buckets"`
	HotSince     *time.Time `json:"hot_since,omitempty"`
	SplitAt      *time.Time `json:"split_at,omitempty"`

	StockTotal    int64 `json:"stock_total"`     // units (or items) on sale in all, top-ups included
	ToppedUpUnits int64 `json:"topped_up_units"` // of which added while on sale
	UnsoldUnits   int64 `json:"unsold_units"`    // not held by a live order now (MySQL's stock)

	AdmittedOrders int64 `json:"admitted_orders"` // every 202: one order each
	AdmittedUnits  int64 `json:"admitted_units"`
	// DistinctBuyers: users holding at least one order that did not fail.
	DistinctBuyers int64                  `json:"distinct_buyers"`
	Orders         map[order.Status]int64 `json:"orders"`
	// PaidShare: paid orders ÷ orders that did not fail, for kinds that
	// are paid for (nil for kinds that need no payment, or no orders).
	PaidShare *float64 `json:"paid_share"`

	// ReleasedUnits went back to stock (cancelled, unpaid, failed), by
	// reason; ResoldUnits of them were sold again: the units taken by
	// orders that did not fail beyond the stock, which only released
	// units can be.
	ReleasedUnits    int64            `json:"released_units"`
	ReleasedByReason map[string]int64 `json:"released_by_reason"`
	ResoldUnits      int64            `json:"resold_units"`

	// FailedByReason: orders admitted by Redis that MySQL refused or that
	// were dead-lettered, by reason; DeadLetters is the dead_letter share.
	FailedByReason map[string]int64 `json:"failed_by_reason"`
	DeadLetters    int64            `json:"dead_letters"`
	// LatePayments: payments that arrived for an order no longer holding
	// its unit, recorded for a refund.
	LatePayments int64 `json:"late_payments"`

	// Envelopes: the amount grabbed and refunded to the sender.
	GrabbedAmount  *int64     `json:"grabbed_amount,omitempty"`
	RefundedAmount *int64     `json:"refunded_amount,omitempty"`
	RefundedAt     *time.Time `json:"refunded_at,omitempty"`

	Persistence Persistence `json:"persistence"`
}

// Persistence is how far MySQL lagged behind admission, from the orders
// that record when they were persisted (migration 0009).
type Persistence struct {
	Orders    int64 `json:"orders"`  // orders the figures cover
	Unknown   int64 `json:"unknown"` // orders persisted before persisted_at existed
	MaxLagMS  int64 `json:"max_lag_ms"`
	P99LagMS  int64 `json:"p99_lag_ms"`
	MeanLagMS int64 `json:"mean_lag_ms"`
	// LargestBacklog: the most orders of this voucher admitted but not yet
	// in MySQL at one time, and when.
	LargestBacklog   int64      `json:"largest_backlog"`
	LargestBacklogAt *time.Time `json:"largest_backlog_at"`
}

// Report computes voucher v's report; ErrNotFound if there is no such
// voucher. The queries read the voucher's rows only (orders through its
// index), once each; nothing is held in memory per order.
func (s *Store) Report(ctx context.Context, v int64) (Report, error) {
	vo, err := s.Voucher(ctx, v)
	if err != nil {
		return Report{}, err
	}
	db := s.db.WithContext(ctx)
	r := Report{OpenedAt: vo.CreatedAt, EndsAt: vo.EndsAt, StockTotal: vo.StockTotal, UnsoldUnits: vo.Stock,
		StockBuckets: max(vo.StockBuckets, 1), HotSince: utc(vo.HotSince), SplitAt: utc(vo.SplitAt),
		ReleasedByReason: map[string]int64{}, FailedByReason: map[string]int64{}}
	if vo.StartsAt != nil && vo.StartsAt.After(vo.CreatedAt) {
		r.OpenedAt = *vo.StartsAt
	}
	if r.Orders, err = s.OrderCounts(ctx, v); err != nil {
		return r, err
	}

	var adm struct {
		Orders, Units, Buyers, Taken int64
		First, Last                  *time.Time
	}
	if err := db.Raw(`SELECT COUNT(*) AS orders, COALESCE(SUM(quantity), 0) AS units,
			COUNT(DISTINCT CASE WHEN status <> 'failed' THEN user_id END) AS buyers,
			COALESCE(SUM(CASE WHEN status <> 'failed' THEN quantity END), 0) AS taken,
			MIN(created_at) AS first, MAX(created_at) AS last
		FROM orders WHERE voucher_id = ?`, v).Scan(&adm).Error; err != nil {
		return r, fmt.Errorf("report %d: admissions: %w", v, err)
	}
	r.AdmittedOrders, r.AdmittedUnits, r.DistinctBuyers = adm.Orders, adm.Units, adm.Buyers
	r.FirstAdmissionAt, r.LastAdmissionAt = utc(adm.First), utc(adm.Last)
	r.ResoldUnits = max(0, adm.Taken-vo.StockTotal)
	// The orders a paid share is of: those that did not fail; for a draw,
	// the orders the draw (or its waitlist) made, entries taking no unit
	// (and none is ever resold).
	sold := adm.Orders - r.Orders[order.StatusFailed]
	if vo.IsDraw() {
		r.ResoldUnits = 0
		if err := db.Raw("SELECT COUNT(*) FROM orders WHERE voucher_id = ? AND drawn > 0", v).Scan(&sold).Error; err != nil {
			return r, fmt.Errorf("report %d: drawn orders: %w", v, err)
		}
	}
	if !vo.Traits().NoPayment && sold > 0 {
		share := float64(r.Orders[order.StatusPaid]) / float64(sold)
		r.PaidShare = &share
	}

	if err := db.Raw(`SELECT COALESCE(SUM(add_stock), 0) FROM voucher_changes WHERE voucher_id = ? AND add_stock > 0`, v).
		Scan(&r.ToppedUpUnits).Error; err != nil {
		return r, fmt.Errorf("report %d: top-ups: %w", v, err)
	}
	if err := groupSums(db.Raw(`SELECT reason AS k, SUM(quantity) AS n FROM releases WHERE voucher_id = ? GROUP BY reason`, v), r.ReleasedByReason); err != nil {
		return r, fmt.Errorf("report %d: releases: %w", v, err)
	}
	for _, n := range r.ReleasedByReason {
		r.ReleasedUnits += n
	}
	if err := groupSums(db.Raw(`SELECT reason AS k, COUNT(*) AS n FROM orders WHERE voucher_id = ? AND status = 'failed' GROUP BY reason`, v), r.FailedByReason); err != nil {
		return r, fmt.Errorf("report %d: failures: %w", v, err)
	}
	r.DeadLetters = r.FailedByReason[ReasonDeadLetter]
	if err := db.Raw(`SELECT COUNT(*) FROM late_payments p JOIN orders o ON o.id = p.order_id WHERE o.voucher_id = ?`, v).
		Scan(&r.LatePayments).Error; err != nil {
		return r, fmt.Errorf("report %d: late payments: %w", v, err)
	}
	if vo.Traits().RefundsAtEnd {
		a, err := s.VoucherAmounts(ctx, v)
		if err != nil {
			return r, err
		}
		r.GrabbedAmount, r.RefundedAmount, r.RefundedAt = &a.Grabbed, &vo.RefundedAmount, utc(vo.RefundedAt)
	}

	if vo.IsDraw() { // entries never take Redis's stock: a draw does not sell out
		r.Persistence, err = s.persistence(ctx, v)
		return r, err
	}
	if r.SoldOutAt, err = s.soldOutAt(ctx, v, vo.StockTotal-r.ToppedUpUnits); err != nil {
		return r, err
	}
	if r.SoldOutAt != nil {
		ms := max(0, r.SoldOutAt.Sub(r.OpenedAt).Milliseconds())
		r.TimeToSellOutMS = &ms
	}
	r.Persistence, err = s.persistence(ctx, v)
	return r, err
}

// soldOutAt sweeps voucher v's stock through time: initial units, minus
// each order's units at its admission, plus each release and top-up from
// when Redis had it (redis_released_at, redis_applied_at; one still owed
// has not reached Redis). The first instant no unit is left is when it
// sold out. Events at the same millisecond count together.
func (s *Store) soldOutAt(ctx context.Context, v, initial int64) (*time.Time, error) {
	var at sql.NullTime
	err := s.db.WithContext(ctx).Raw(`SELECT MIN(t) FROM (
			SELECT t, SUM(d) OVER (ORDER BY t) AS used FROM (
				SELECT created_at AS t, SUM(quantity) AS d FROM orders WHERE voucher_id = ? GROUP BY created_at
				UNION ALL SELECT redis_released_at, -SUM(quantity) FROM releases
					WHERE voucher_id = ? AND redis_released_at IS NOT NULL GROUP BY redis_released_at
				UNION ALL SELECT redis_applied_at, -SUM(add_stock) FROM voucher_changes
					WHERE voucher_id = ? AND add_stock > 0 AND redis_applied_at IS NOT NULL GROUP BY redis_applied_at
			) e
		) s WHERE used >= ?`, v, v, v, initial).Scan(&at).Error
	if err != nil {
		return nil, fmt.Errorf("report %d: sold out at: %w", v, err)
	}
	if !at.Valid {
		return nil, nil
	}
	return utc(&at.Time), nil
}

// persistence measures the lag between admission (created_at) and
// MySQL (persisted_at) of voucher v's orders, and sweeps the number of
// orders admitted but not yet persisted through time.
func (s *Store) persistence(ctx context.Context, v int64) (Persistence, error) {
	db := s.db.WithContext(ctx)
	var p Persistence
	var agg struct {
		Known, Unknown int64
		Max, Mean      float64
	}
	if err := db.Raw(`SELECT COUNT(persisted_at) AS known, COUNT(*) - COUNT(persisted_at) AS unknown,
			COALESCE(MAX(TIMESTAMPDIFF(MICROSECOND, created_at, persisted_at)), 0) AS max,
			COALESCE(AVG(TIMESTAMPDIFF(MICROSECOND, created_at, persisted_at)), 0) AS mean
		FROM orders WHERE voucher_id = ?`, v).Scan(&agg).Error; err != nil {
		return p, fmt.Errorf("report %d: lag: %w", v, err)
	}
	p.Orders, p.Unknown = agg.Known, agg.Unknown
	p.MaxLagMS, p.MeanLagMS = int64(agg.Max/1000), int64(agg.Mean/1000)
	if p.Orders == 0 {
		return p, nil
	}
	// The 99th percentile, nearest rank: the ceil(0.99 n)-th smallest lag.
	rank := (99*p.Orders + 99) / 100
	var p99 float64
	if err := db.Raw(`SELECT TIMESTAMPDIFF(MICROSECOND, created_at, persisted_at) AS lag FROM orders
		WHERE voucher_id = ? AND persisted_at IS NOT NULL ORDER BY lag LIMIT 1 OFFSET ?`, v, rank-1).Scan(&p99).Error; err != nil {
		return p, fmt.Errorf("report %d: lag p99: %w", v, err)
	}
	p.P99LagMS = int64(p99 / 1000)

	var peak struct {
		T       *time.Time
		Backlog int64
	}
	if err := db.Raw(`SELECT t, backlog FROM (
			SELECT t, SUM(d) OVER (ORDER BY t) AS backlog FROM (
				SELECT created_at AS t, COUNT(*) AS d FROM orders WHERE voucher_id = ? AND persisted_at IS NOT NULL GROUP BY created_at
				UNION ALL SELECT persisted_at, -COUNT(*) FROM orders WHERE voucher_id = ? AND persisted_at IS NOT NULL GROUP BY persisted_at
			) e
		) s ORDER BY backlog DESC, t LIMIT 1`, v, v).Scan(&peak).Error; err != nil {
		return p, fmt.Errorf("report %d: backlog: %w", v, err)
	}
	p.LargestBacklog, p.LargestBacklogAt = peak.Backlog, utc(peak.T)
	return p, nil
}

// groupSums scans rows of (k, n) into into.
func groupSums(q *gorm.DB, into map[string]int64) error {
	var rows []struct {
		K string
		N int64
	}
	if err := q.Scan(&rows).Error; err != nil {
		return err
	}
	for _, r := range rows {
		into[r.K] += r.N
	}
	return nil
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
