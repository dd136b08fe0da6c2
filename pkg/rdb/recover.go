package rdb

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/lua"
)

// Claimed is one page of XAUTOCLAIM.
type Claimed struct {
	// Entries are the orders of the stream entries claimed, each stream
	// entry's orders together.
	Entries []StreamOrder
	// Deliveries maps each claimed stream entry to its delivery count, this
	// claim included.
	Deliveries map[string]int64
	// Deleted are pending entries that no longer exist in the stream; they
	// were acknowledged (there is nothing left to process).
	Deleted []string
	// Next is the cursor of the next page; "0-0" when the scan is complete.
	Next string
}

// AutoClaim takes over up to count entries of partition p that have been
// pending for at least minIdle, for consumer, starting at cursor start
// ("0-0" for the beginning).
func (s *Store) AutoClaim(ctx context.Context, p int, consumer string, minIdle time.Duration, start string, count int) (Claimed, error) {
	msgs, next, deleted, err := s.c.XAutoClaimWithDeleted(ctx, &redis.XAutoClaimArgs{
		Stream: StreamKey(p), Group: s.group, Consumer: consumer, MinIdle: minIdle, Start: start, Count: int64(count),
	}).Result()
	if err != nil {
		return Claimed{}, fmt.Errorf("xautoclaim %s: %w", StreamKey(p), err)
	}
	c := Claimed{Next: next, Deleted: deleted, Deliveries: map[string]int64{}}
	for _, m := range msgs {
		c.Entries = append(c.Entries, parseEntries(p, m)...)
	}
	if len(deleted) > 0 {
		if err := s.c.XAck(ctx, StreamKey(p), s.group, deleted...).Err(); err != nil {
			return c, fmt.Errorf("ack deleted entries of %s: %w", StreamKey(p), err)
		}
	}
	if len(msgs) > 0 {
		pend, err := s.c.XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: StreamKey(p), Group: s.group, Start: msgs[0].ID,
			End: msgs[len(msgs)-1].ID, Count: int64(len(msgs)), Consumer: consumer,
		}).Result()
		if err != nil {
			return c, fmt.Errorf("xpending %s: %w", StreamKey(p), err)
		}
		for _, pe := range pend {
			c.Deliveries[pe.ID] = pe.RetryCount
		}
	}
	return c, nil
}

// ConsumerAliveTTL is how long a consumer's liveness key (AliveKey)
// outlives its last renewal; a running worker renews it every third of
// that.
const ConsumerAliveTTL = time.Minute

// Alive renews consumer c's liveness key of partition p.
func (s *Store) Alive(ctx context.Context, p int, c string) error {
	if err := s.c.Set(ctx, AliveKey(p, c), 1, ConsumerAliveTTL).Err(); err != nil {
		return fmt.Errorf("renew the liveness of %s: %w", c, err)
	}
	return nil
}

// RemoveGoneConsumers removes from partition p's group every consumer other
// than keep that has been idle for at least idle, has nothing pending and
// no liveness key (checked atomically with the removal). It returns the
// names removed.
func (s *Store) RemoveGoneConsumers(ctx context.Context, p int, idle time.Duration, keep string) ([]string, error) {
	consumers, err := s.c.XInfoConsumers(ctx, StreamKey(p), s.group).Result()
	if err != nil {
		if IsNoGroup(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("xinfo consumers %s: %w", StreamKey(p), err)
	}
	var removed []string
	for _, c := range consumers {
		if c.Name == keep || c.Pending > 0 || c.Idle < idle {
			continue
		}
		n, err := lua.DelConsumer.Run(ctx, s.c, []string{StreamKey(p), AliveKey(p, c.Name)}, s.group, c.Name).Int()
		if err != nil {
			return removed, fmt.Errorf("remove consumer %s: %w", c.Name, err)
		}
		if n == 1 {
			removed = append(removed, c.Name)
		}
	}
	return removed, nil
}
