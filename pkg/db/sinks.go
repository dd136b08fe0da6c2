package db

// Where each sink of the order events stands (sql/0016_event_sinks.sql):
// the reaper's relay holds a sink's lease, sends the events after
// delivered_upto and moves it on; an event a webhook endpoint did not
// take in time is recorded in event_failures and the sink moves past it.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"
)

// SinkState is where a sink stands.
type SinkState struct {
	Name          string
	DeliveredUpto int64
	Owner         string
	LeaseUntil    *time.Time
	FailingSince  *time.Time
	Attempts      int
	LastError     string
	Disabled      string
	SeenAt        time.Time
	// Failed: events recorded failed for the sink (all its parts').
	Failed int64
	// Oldest: when the oldest event not delivered was written (nil: none).
	Oldest *time.Time
}

// HoldSink takes, or renews, owner's lease on the sink name for ttl and
// returns the sink and whether owner holds it. owner is a lease token,
// one per process: a lease is owner's alone, whatever the reapers are
// named. A sink seen for the first time starts at the last sequence
// given: it gets the events to come ("reaper events redeliver --after"
// backfills).
//
// The row is locked for update before anything else: an INSERT IGNORE
// first would take a shared lock on a row that exists, and two reapers
// holding it shared and both asking to update it deadlock. A deadlock
// left (two reapers adding the same new sink) is retried.
func (s *Store) HoldSink(ctx context.Context, name, owner string, ttl time.Duration) (SinkState, bool, error) {
	var st SinkState
	held := false
	err := retryDeadlock(func() error {
		held = false
		return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			var row struct {
				SinkState
				Free bool
			}
			read := func() error {
				return tx.Raw(`SELECT `+sinkColumns+`,
				(owner IS NULL OR owner = ? OR lease_until < UTC_TIMESTAMP(3)) AS free
				FROM event_sinks WHERE name = ? FOR UPDATE`, owner, name).Scan(&row).Error
			}
			if err := read(); err != nil {
				return fmt.Errorf("read sink %s: %w", name, err)
			}
			if row.Name == "" {
				if err := tx.Exec(`INSERT IGNORE INTO event_sinks (name, delivered_upto, seen_at)
				SELECT ?, last, UTC_TIMESTAMP(3) FROM event_sequence WHERE id = 1`, name).Error; err != nil {
					return fmt.Errorf("add sink %s: %w", name, err)
				}
				if err := read(); err != nil {
					return fmt.Errorf("read sink %s: %w", name, err)
				}
			}
			st = row.SinkState
			if !row.Free {
				return nil
			}
			held = true
			st.Owner = owner
			return tx.Exec(`UPDATE event_sinks SET owner = ?, lease_until = UTC_TIMESTAMP(3) + INTERVAL ? MICROSECOND, seen_at = UTC_TIMESTAMP(3)
			WHERE name = ?`, owner, ttl.Microseconds(), name).Error
		}, readCommitted)
	})
	return st, held, err
}

// retryDeadlock runs f, 3 times at most, until MySQL does not choose it
// as a deadlock's victim (a victim's transaction is rolled back whole,
// so running it again is safe).
func retryDeadlock(f func() error) error {
	var err error
	for range 3 {
		if err = f(); !isDeadlock(err) {
			return err
		}
	}
	return err
}

func isDeadlock(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == ErrNumDeadlock
}

// ReleaseSink gives up owner's lease on name (a reaper shutting down).
func (s *Store) ReleaseSink(ctx context.Context, name, owner string) error {
	return s.db.WithContext(ctx).Exec("UPDATE event_sinks SET owner = NULL, lease_until = NULL WHERE name = ? AND owner = ?", name, owner).Error
}

// AdvanceSink records that owner delivered name's events after from up
// to upto. It reports false when the sink is no longer at from, or no
// longer owner's (an operator's redeliver, a lease taken over): the
// caller reads the sink again.
func (s *Store) AdvanceSink(ctx context.Context, name, owner string, from, upto int64) (bool, error) {
	moved := false
	err := retryDeadlock(func() error { // a victim's retry: what was delivered is not sent again
		res := s.db.WithContext(ctx).Exec(`UPDATE event_sinks SET delivered_upto = ?, failing_since = NULL, attempts = 0, last_error = ''
			WHERE name = ? AND owner = ? AND delivered_upto = ?`, upto, name, owner, from)
		moved = res.RowsAffected == 1
		return res.Error
	})
	return moved, err
}

// SinkFailing records a failed attempt at the event after name's
// delivered_upto and returns how long that event has been failing.
func (s *Store) SinkFailing(ctx context.Context, name, owner, cause string) (time.Duration, error) {
	var failing time.Duration
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec(`UPDATE event_sinks SET failing_since = COALESCE(failing_since, UTC_TIMESTAMP(3)), attempts = attempts + 1,
			last_error = LEFT(?, 255) WHERE name = ? AND owner = ?`, cause, name, owner).Error; err != nil {
			return err
		}
		var us *int64
		if err := tx.Raw("SELECT TIMESTAMPDIFF(MICROSECOND, failing_since, UTC_TIMESTAMP(3)) FROM event_sinks WHERE name = ?", name).
			Scan(&us).Error; err != nil {
			return err
		}
		if us != nil {
			failing = time.Duration(*us) * time.Microsecond
		}
		return nil
	}, readCommitted)
	return failing, err
}

// GiveUpSinkEvent records event seq failed for name (after attempts, the
// last failing with cause) and moves the sink past it. A failure is the
// sink's, whichever part's row name is (SinkOfRow).
func (s *Store) GiveUpSinkEvent(ctx context.Context, name, owner string, seq int64, cause string) error {
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Exec(`UPDATE event_sinks SET delivered_upto = ?, failing_since = NULL, attempts = 0, last_error = ''
			WHERE name = ? AND owner = ? AND delivered_upto = ?`, seq, name, owner, seq-1)
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error // another reaper moved it on
		}
		return tx.Exec(`INSERT INTO event_failures (sink, sequence, failed_at, attempts, error, redeliver)
			VALUES (?, ?, UTC_TIMESTAMP(3), 1, LEFT(?, 255), 0)
			ON DUPLICATE KEY UPDATE failed_at = VALUES(failed_at), attempts = event_failures.attempts + 1, error = VALUES(error), redeliver = 0`,
			SinkOfRow(name), seq, cause).Error
	}, readCommitted)
}

// FailSinkEvent records event seq failed for name (a lane's event not
// taken in time, its last attempt failing with cause), without moving
// delivered_upto: the relay moves it past seq once every event before is
// done too. Nothing is recorded unless owner holds the sink.
func (s *Store) FailSinkEvent(ctx context.Context, name, owner string, seq int64, cause string) error {
	return s.db.WithContext(ctx).Exec(`INSERT INTO event_failures (sink, sequence, failed_at, attempts, error, redeliver)
		SELECT ?, ?, UTC_TIMESTAMP(3), 1, LEFT(?, 255), 0 FROM event_sinks WHERE name = ? AND owner = ?
		ON DUPLICATE KEY UPDATE failed_at = VALUES(failed_at), attempts = event_failures.attempts + 1, error = VALUES(error), redeliver = 0`,
		SinkOfRow(name), seq, cause, name, owner).Error
}

// DisableSink stops name's sink, every part of it (the endpoint answered
// 410 Gone), until RedeliverSink starts it again; nothing is stopped
// unless owner holds name.
func (s *Store) DisableSink(ctx context.Context, name, owner, why string) error {
	sink := SinkOfRow(name)
	return s.db.WithContext(ctx).Exec(`UPDATE event_sinks SET disabled = LEFT(?, 255) WHERE `+sinkRows+`
		AND EXISTS (SELECT 1 FROM (SELECT name FROM event_sinks WHERE name = ? AND owner = ?) AS held)`,
		append(append([]any{why}, sinkArgs(sink)...), name, owner)...).Error
}

// FailedToRedeliver is up to limit sequences recorded failed for name
// that an operator asked to redeliver, lowest first.
func (s *Store) FailedToRedeliver(ctx context.Context, name string, limit int) ([]int64, error) {
	var seqs []int64
	err := s.db.WithContext(ctx).Raw("SELECT sequence FROM event_failures WHERE sink = ? AND redeliver = 1 ORDER BY sequence LIMIT ?", name, limit).
		Scan(&seqs).Error
	return seqs, err
}

// Redelivered ends the failure of seq for name: delivered at last (ok),
// or failed again with cause.
func (s *Store) Redelivered(ctx context.Context, name string, seq int64, ok bool, cause string) error {
	db := s.db.WithContext(ctx)
	if ok {
		return db.Exec("DELETE FROM event_failures WHERE sink = ? AND sequence = ?", name, seq).Error
	}
	return db.Exec(`UPDATE event_failures SET redeliver = 0, attempts = attempts + 1, failed_at = UTC_TIMESTAMP(3), error = LEFT(?, 255)
		WHERE sink = ? AND sequence = ?`, cause, name, seq).Error
}

// ErrNoSink is RedeliverSink's error for a sink no reaper has relayed.
var ErrNoSink = errors.New("no such sink")

// ErrAfterPastLast is RedeliverSink's error for an after past the last
// sequence published.
var ErrAfterPastLast = errors.New("past the last event published")

// RedeliverSink sends name's events after after again (or for the first
// time: a backfill), every part's, and starts it again if it was
// disabled. It returns
// the first kept event it will send (0: none kept after after; the
// events between after and it were deleted past the retention) and the
// last published; an after past the last is ErrAfterPastLast.
func (s *Store) RedeliverSink(ctx context.Context, name string, after int64) (first, last int64, err error) {
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Raw("SELECT last FROM event_sequence WHERE id = 1").Scan(&last).Error; err != nil {
			return err
		}
		if after > last {
			return fmt.Errorf("after %d: %w, %d", after, ErrAfterPastLast, last)
		}
		res := tx.Exec(`UPDATE event_sinks SET delivered_upto = ?, failing_since = NULL, attempts = 0, last_error = '', disabled = ''
			WHERE `+sinkRows, append([]any{after}, sinkArgs(name)...)...)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			var n int64
			if err := tx.Raw("SELECT COUNT(*) FROM event_sinks WHERE "+sinkRows, sinkArgs(name)...).Scan(&n).Error; err != nil || n == 0 {
				return errors.Join(fmt.Errorf("%w %q", ErrNoSink, name), err)
			}
		}
		heads, err := rowsAfter(tx, after, 1)
		if err != nil || len(heads) == 0 {
			return err
		}
		first = max(*heads[0].Sequence, after+1)
		return nil
	}, readCommitted)
	return first, last, err
}

// RedeliverFailed asks for the events recorded failed for name's sink
// to be sent again (a part's name: the sink's), and returns how many.
func (s *Store) RedeliverFailed(ctx context.Context, name string) (int64, error) {
	if n, err := s.sinkCount(ctx, name); err != nil || n == 0 {
		return 0, errors.Join(fmt.Errorf("%w %q", ErrNoSink, name), err)
	}
	res := s.db.WithContext(ctx).Exec("UPDATE event_failures SET redeliver = 1 WHERE sink = ? AND redeliver = 0", SinkOfRow(name))
	return res.RowsAffected, res.Error
}

func (s *Store) sinkCount(ctx context.Context, name string) (int64, error) {
	var n int64
	err := s.db.WithContext(ctx).Raw("SELECT COUNT(*) FROM event_sinks WHERE "+sinkRows, sinkArgs(name)...).Scan(&n).Error
	return n, err
}

// SinkStates is every sink a reaper has relayed, by name, with its
// failures and its oldest undelivered event.
func (s *Store) SinkStates(ctx context.Context) ([]SinkState, error) {
	db := s.db.WithContext(ctx)
	var out []SinkState
	if err := db.Raw(`SELECT ` + sinkColumns + ` FROM event_sinks ORDER BY name`).Scan(&out).Error; err != nil {
		return nil, fmt.Errorf("read the sinks: %w", err)
	}
	for i := range out {
		st := &out[i]
		if err := db.Raw("SELECT COUNT(*) FROM event_failures WHERE sink = ?", SinkOfRow(st.Name)).Scan(&st.Failed).Error; err != nil {
			return nil, fmt.Errorf("read sink %s's failures: %w", st.Name, err)
		}
		oldest, err := s.OldestAfter(ctx, st.DeliveredUpto)
		if err != nil {
			return nil, err
		}
		st.Oldest = oldest
	}
	return out, nil
}

// LastSequence is the last sequence given.
func (s *Store) LastSequence(ctx context.Context) (int64, error) {
	var last int64
	err := s.db.WithContext(ctx).Raw("SELECT last FROM event_sequence WHERE id = 1").Scan(&last).Error
	return last, err
}

// sinksKeep is the lowest sequence a sink still needs (delivered_upto +
// 1) among the sinks relayed since seenSince and not disabled; 0: none.
func sinksKeep(tx *gorm.DB, seenSince time.Time) (int64, error) {
	var keep *int64
	err := tx.Raw("SELECT MIN(delivered_upto) + 1 FROM event_sinks WHERE disabled = '' AND seen_at >= ?", seenSince).Scan(&keep).Error
	if err != nil || keep == nil {
		return 0, err
	}
	return *keep, nil
}
