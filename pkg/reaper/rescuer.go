package reaper

// The rescuer: entries that workers left pending (a crash, a lost lease)
// are taken over and processed, and poison ones dead-lettered.

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/rdb"
)

// RescuerResult is what a round of the rescuer did.
type RescuerResult struct {
	// TakenOver are the orders of stale stream entries taken over and
	// processed.
	TakenOver int `log:"taken_over"`
	// DeadLettered are the orders of stream entries delivered more than
	// MaxDeliveries times that failed alone.
	DeadLettered int `log:"dead_lettered"`
	// DeletedAcked are the unacknowledged entries no longer in the stream.
	DeletedAcked int `log:"deleted_acked"`
}

func (rr RescuerResult) count(m *metrics) {
	m.takenOver.Add(float64(rr.TakenOver))
	m.deadLetters.Add(float64(rr.DeadLettered))
}

// rescue takes over the stale entries of every partition.
func (r *Reaper) rescue(ctx context.Context, res *RescuerResult) error {
	var errs []error
	for p := range r.redis.Partitions() {
		errs = append(errs, r.takeOver(ctx, p, res))
	}
	return errors.Join(errs...)
}

// takeOver pages through partition p's stale pending entries with
// XAUTOCLAIM until the cursor comes back to 0-0. It takes over nothing
// while MySQL refuses writes: each takeover counts a delivery, and an outage must
// not push entries towards the dead-letter stream. An entry delivered more
// than MaxDeliveries times gets one last ordinary attempt, and is
// dead-lettered only if that fails while MySQL accepts writes.
func (r *Reaper) takeOver(ctx context.Context, p int, res *RescuerResult) error {
	if err := r.db.Writable(ctx, r.cfg.Consumer); err != nil {
		return fmt.Errorf("partition %d: not taking over while mysql refuses writes: %w", p, err)
	}
	cursor := "0-0"
	for {
		c, err := r.streams.TakeOver(ctx, p, r.cfg.Consumer, r.cfg.TakeoverMinIdle, cursor, r.cfg.BatchSize)
		if err != nil {
			return err
		}
		res.DeletedAcked += len(c.Deleted)
		if len(c.Deleted) > 0 {
			r.log.Error("pending entries were deleted from the stream before being persisted", zap.Int("partition", p), zap.Strings("stream_ids", c.Deleted))
		}
		var fresh []rdb.StreamOrder
		var worn [][]rdb.StreamOrder // each a stream entry's orders
		for _, e := range c.Orders {
			switch {
			case c.Deliveries[e.StreamID] <= r.cfg.MaxDeliveries:
				fresh = append(fresh, e)
			case len(worn) > 0 && worn[len(worn)-1][0].StreamID == e.StreamID:
				worn[len(worn)-1] = append(worn[len(worn)-1], e)
			default:
				worn = append(worn, []rdb.StreamOrder{e})
			}
		}
		// The same code as a worker's batch: idempotent, ack after commit.
		if err := r.orders.Handle(ctx, fresh); err != nil {
			return fmt.Errorf("partition %d: %w", p, err)
		}
		res.TakenOver += len(fresh)
		for _, orders := range worn {
			dead, err := r.retire(ctx, orders, c.Deliveries[orders[0].StreamID])
			if err != nil {
				return fmt.Errorf("partition %d: %w", p, err)
			}
			res.DeadLettered += dead
			res.TakenOver += len(orders) - dead
		}
		if c.Next == "0-0" || c.Next == "" {
			return nil
		}
		cursor = c.Next
	}
}

// retire decides the orders of a stream entry delivered n > MaxDeliveries
// times: one last ordinary attempt; if that fails while MySQL accepts
// writes, each order once on its own, and the dead-letter stream (with a
// recorded failure and its unit given back) only for an order that fails
// alone, so that one bad order does not take its entry-mates with it.
func (r *Reaper) retire(ctx context.Context, orders []rdb.StreamOrder, n int64) (deadLettered int, err error) {
	lastErr := r.orders.Handle(ctx, orders)
	if lastErr == nil {
		return 0, nil
	}
	if err := r.db.Writable(ctx, r.cfg.Consumer); err != nil {
		return 0, fmt.Errorf("entry %s delivered %d times waits: mysql refuses writes: %w", orders[0].StreamID, n, err)
	}
	defer r.orders.HoldLease(ctx, orders)()
	for _, e := range orders {
		err := r.orders.Persist(ctx, []rdb.StreamOrder{e})
		if err == nil {
			continue
		}
		if len(orders) == 1 {
			err = lastErr
		}
		reason := fmt.Sprintf("delivered %d times; last error: %v", n, err)
		if err := r.orders.DeadLetter(ctx, e, reason); err != nil {
			return deadLettered, err
		}
		deadLettered++
	}
	return deadLettered, r.orders.Ack(ctx, orders)
}
