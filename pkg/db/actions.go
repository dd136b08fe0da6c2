package db

// The record of what was done to each voucher and by whom
// (sql/0020_voucher_actions.sql): every change of a voucher writes its
// actions in its own transaction, so the record holds exactly the changes
// that were made, whoever made them (the admin API, the reaper's
// commands, the hot-voucher detector).

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"time"

	"gorm.io/gorm"
)

// Actor names who acts on a voucher: ActorAdmin, CLIActor's, ActorReaper.
type Actor string

// The actors that are not a person at a terminal.
const (
	// ActorAdmin is the admin API's caller, the console's included: the
	// holder of FLASHSALE_ADMIN_TOKEN (there is one admin token).
	ActorAdmin Actor = "admin"
	// ActorReaper is the reaper's hot-voucher detector, which asks splits.
	ActorReaper Actor = "reaper"
)

// CLIActor is the reaper's command run by the operating system's user.
func CLIActor(user string) Actor { return Actor("cli:" + user) }

// The actions, each the msg of its log line.
const (
	ActionCreated      = "voucher created"
	ActionPaused       = "voucher paused"
	ActionResumed      = "voucher resumed"
	ActionStockAdded   = "stock added"
	ActionEndMoved     = "end moved"
	ActionGateChanged  = "proof of work changed"
	ActionRoomChanged  = "waiting room changed"
	ActionAccessChange = "access codes changed"
	ActionSplitAsked   = "split asked"
)

// Action is a row of voucher_actions: one thing an actor did to a
// voucher, the fields it changed before and after (as the API names
// them).
type Action struct {
	ID        int64 `gorm:"primaryKey"`
	VoucherID int64
	At        time.Time
	Actor     Actor
	// Action is one of the Action… constants.
	Action string
	Before string `gorm:"column:before_value"`
	After  string `gorm:"column:after_value"`
}

// TableName is gorm's.
func (Action) TableName() string { return "voucher_actions" }

// actionsOf are the actions that turned voucher was into now.
func actionsOf(was, now Voucher, by Actor, at time.Time) []Action {
	var out []Action
	add := func(action, field, before, after string) {
		if before == after {
			return
		}
		out = append(out, Action{VoucherID: now.ID, At: at, Actor: by, Action: action,
			Before: field + "=" + before, After: field + "=" + after})
	}
	if was.Paused != now.Paused {
		action := ActionResumed
		if now.Paused {
			action = ActionPaused
		}
		add(action, "paused", strconv.FormatBool(was.Paused), strconv.FormatBool(now.Paused))
	}
	add(ActionStockAdded, "stock_total", strconv.FormatInt(was.StockTotal, 10), strconv.FormatInt(now.StockTotal, 10))
	add(ActionEndMoved, "ends_at", timeWord(was.EndsAt), timeWord(now.EndsAt))
	add(ActionGateChanged, "proof_of_work", strconv.FormatInt(was.PowMaxNumber, 10), strconv.FormatInt(now.PowMaxNumber, 10))
	add(ActionRoomChanged, "waiting_room", cmp.Or(was.WaitingRoom, "none"), cmp.Or(now.WaitingRoom, "none"))
	add(ActionAccessChange, "access", strconv.FormatInt(was.Access, 10), strconv.FormatInt(now.Access, 10))
	if now.SplitTo > max(was.SplitTo, was.StockBuckets) {
		add(ActionSplitAsked, "stock_buckets", strconv.Itoa(max(was.StockBuckets, 1)), strconv.Itoa(now.SplitTo))
	}
	return out
}

// creation is the action that created v.
func creation(v Voucher, by Actor, at time.Time) Action {
	return Action{VoucherID: v.ID, At: at, Actor: by, Action: ActionCreated,
		After: fmt.Sprintf("kind=%s stock_total=%d per_user_limit=%d", v.Kind, v.StockTotal, v.PerUserLimit)}
}

func timeWord(t *time.Time) string {
	if t == nil {
		return "none"
	}
	return t.UTC().Format(time.RFC3339)
}

// recordActions writes actions in tx.
func recordActions(tx *gorm.DB, actions []Action) error {
	if len(actions) == 0 {
		return nil
	}
	if err := tx.Create(&actions).Error; err != nil {
		return fmt.Errorf("record voucher actions: %w", err)
	}
	return nil
}

// VoucherActions returns the last limit actions on voucher id, newest
// first.
func (s *Store) VoucherActions(ctx context.Context, id int64, limit int) ([]Action, error) {
	var out []Action
	err := s.db.WithContext(ctx).Where("voucher_id = ?", id).Order("id DESC").Limit(limit).Find(&out).Error
	return out, err
}
