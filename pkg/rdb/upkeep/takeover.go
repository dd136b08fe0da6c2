package upkeep

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/lua"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// TakenOver is one page of XAUTOCLAIM.
type TakenOver struct {
	// Orders are the orders of the stream entries taken over, each stream
	// entry's orders together.
	Orders []rdb.StreamOrder
	// Deliveries maps each stream entry taken over to its delivery count,
	// this takeover included.
	Deliveries map[string]int64
	// Deleted are pending entries that no longer exist in the stream; they
	// were acknowledged (there is nothing left to process).
	Deleted []string
	// Next is the cursor of the next page; "0-0" when the scan is complete.
	Next string
}

// TakeOver takes over up to count entries of partition p that have been
// pending for at least minIdle, for consumer, starting at cursor start
// ("0-0" for the beginning).
func (u *Streams) TakeOver(ctx context.Context, p int, consumer string, minIdle time.Duration, start string, count int) (TakenOver, error) {
	stream, group := rdb.StreamKey(p), u.s.Group()
	msgs, next, deleted, err := u.client().XAutoClaimWithDeleted(ctx, &redis.XAutoClaimArgs{
		Stream: stream, Group: group, Consumer: consumer, MinIdle: minIdle, Start: start, Count: int64(count),
	}).Result()
	if err != nil {
		return TakenOver{}, fmt.Errorf("xautoclaim %s: %w", stream, err)
	}
	c := TakenOver{Next: next, Deleted: deleted, Deliveries: map[string]int64{}}
	for _, m := range msgs {
		c.Orders = append(c.Orders, rdb.ParseEntries(p, m)...)
	}
	if len(deleted) > 0 {
		if err := u.client().XAck(ctx, stream, group, deleted...).Err(); err != nil {
			return c, fmt.Errorf("ack deleted entries of %s: %w", stream, err)
		}
	}
	if len(msgs) > 0 {
		pend, err := u.client().XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: stream, Group: group, Start: msgs[0].ID,
			End: msgs[len(msgs)-1].ID, Count: int64(len(msgs)), Consumer: consumer,
		}).Result()
		if err != nil {
			return c, fmt.Errorf("xpending %s: %w", stream, err)
		}
		for _, pe := range pend {
			c.Deliveries[pe.ID] = pe.RetryCount
		}
	}
	return c, nil
}

// RemoveGoneConsumers removes from partition p's group every consumer other
// than keep that has been idle for at least idle, has nothing pending and
// no liveness key (rdb.AliveKey, checked atomically with the removal). It
// returns the names removed.
func (u *Streams) RemoveGoneConsumers(ctx context.Context, p int, idle time.Duration, keep string) ([]string, error) {
	stream, group := rdb.StreamKey(p), u.s.Group()
	consumers, err := u.client().XInfoConsumers(ctx, stream, group).Result()
	if err != nil {
		if rdb.IsNoGroup(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("xinfo consumers %s: %w", stream, err)
	}
	var removed []string
	for _, c := range consumers {
		if c.Name == keep || c.Pending > 0 || c.Idle < idle {
			continue
		}
		n, err := lua.DelConsumer.Run(ctx, u.client(), []string{stream, rdb.AliveKey(p, c.Name)}, group, c.Name).Int()
		if err != nil {
			return removed, fmt.Errorf("remove consumer %s: %w", c.Name, err)
		}
		if n == 1 {
			removed = append(removed, c.Name)
		}
	}
	return removed, nil
}
