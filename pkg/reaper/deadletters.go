package reaper

import (
	"context"
	"errors"
	"fmt"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// Requeued is what requeueing one dead letter came to.
type Requeued struct {
	DeadID string `json:"dead_id"`
	// Result: "persisted" (the order is in MySQL now, with Status; the
	// dead letter is gone), "skipped" (Why: already in MySQL, which is
	// final, or not an order; the dead letter stays for purge).
	Result string `json:"result"`
	Status string `json:"status,omitempty"`
	Why    string `json:"why,omitempty"`
}

// RequeueDeadLetters processes the dead letters of partition p named by
// ids (all of them when ids is empty) again, as a worker would, once the
// cause is fixed. Only an order MySQL does not have can be requeued: one
// dead-lettered with its failure recorded is final (its unit was given
// back), and one that is not an order cannot be persisted. A requeued order
// that fails again is dead-lettered again, under a new id.
func (r *Reaper) RequeueDeadLetters(ctx context.Context, p int, ids ...string) ([]Requeued, error) {
	dead, err := r.streams.DeadLetters(ctx, p)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var out []Requeued
	for _, d := range dead {
		if len(want) > 0 && !want[d.DeadID] {
			continue
		}
		res := Requeued{DeadID: d.DeadID, Result: "skipped"}
		if d.Order.Err != nil {
			res.Why = d.Order.Err.Error()
			out = append(out, res)
			continue
		}
		o, err := r.db.Order(ctx, d.Order.Order.ID)
		if err == nil {
			res.Status, res.Why = o.Status, "already in MySQL: final"
			out = append(out, res)
			continue
		}
		if !errors.Is(err, db.ErrNotFound) {
			return out, err
		}
		// Persisted, not acknowledged: the stream entry it came from was
		// acknowledged with it, or is still pending with other orders,
		// which its own processing persists (finding this one persisted).
		if err := r.orders.Persist(ctx, []rdb.StreamOrder{d.Order}); err != nil {
			return out, fmt.Errorf("requeue %s: %w", d.DeadID, err)
		}
		if o, err = r.db.Order(ctx, d.Order.Order.ID); err != nil {
			return out, fmt.Errorf("requeued %s: %w", d.DeadID, err)
		}
		if err := r.streams.DeleteDeadLetters(ctx, p, d.DeadID); err != nil {
			return out, err
		}
		res.Result, res.Status = "persisted", o.Status
		out = append(out, res)
	}
	return out, nil
}
