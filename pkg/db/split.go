package db

import (
	"context"
	"time"

	"gorm.io/gorm"
)

// AskSplit asks for voucher id's Redis buckets to be split to to while
// its sale runs (split_to): the reaper's splitter does it (SplitsOwed,
// split.Splitter.Split, SplitDone). check vets the voucher as it is, locked
// (pkg/voucher's rules); its error is returned as it is. It returns the
// voucher as asked and the action by did (recorded with it; none when
// the split was asked already).
func (s *Store) AskSplit(ctx context.Context, id int64, to int, by Actor, check func(Voucher) error) (Voucher, []Action, error) {
	var v Voucher
	var actions []Action
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		if v, err = lockVoucher(tx, id); err != nil {
			return err
		}
		if err := check(v); err != nil {
			return err
		}
		was := v
		v.SplitTo = to
		if err := tx.Model(&Voucher{}).Where("id = ?", id).Update("split_to", to).Error; err != nil {
			return err
		}
		actions = actionsOf(was, v, by, time.Now().UTC())
		return recordActions(tx, actions)
	}, readCommitted)
	return v, actions, err
}

// SplitsOwed returns the vouchers whose split was asked and not done.
func (s *Store) SplitsOwed(ctx context.Context) ([]Voucher, error) {
	var out []Voucher
	err := s.db.WithContext(ctx).Where("split_to > stock_buckets").Order("id").Find(&out).Error
	return out, err
}

// DropSplit forgets voucher id's split to to, asked and never begun: its
// sale ended, and Redis no longer holds it.
func (s *Store) DropSplit(ctx context.Context, id int64, to int) error {
	return s.db.WithContext(ctx).Model(&Voucher{}).Where("id = ? AND split_to = ?", id, to).
		Update("split_to", gorm.Expr("stock_buckets")).Error
}

// SplitDone records voucher id's split to to done at now: its
// stock_buckets are to from then on. The transaction that records it
// writes its event (voucher.split); a split recorded done before writes
// none.
func (s *Store) SplitDone(ctx context.Context, id int64, to int, now time.Time) error {
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Model(&Voucher{}).Where("id = ? AND split_to = ? AND stock_buckets < ?", id, to, to).
			Updates(map[string]any{"stock_buckets": to, "split_at": now})
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		return insertSnapshots(tx, []Snapshot{{VoucherID: id, Split: &Split{Buckets: to, At: now}}})
	}, readCommitted)
}
