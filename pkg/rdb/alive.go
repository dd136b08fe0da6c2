package rdb

// Liveness and leases: a worker's liveness key, the stream gauges' exporter.

import (
	"context"
	"fmt"
	"time"
)

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

// HoldGaugesLease reports whether who holds the lease of exporting the
// stream gauges (one reaper of several exports them), taking it for ttl
// when nobody holds it and renewing it when who does (one script: atomic).
func (s *Store) HoldGaugesLease(ctx context.Context, who string, ttl time.Duration) (bool, error) {
	n, err := s.c.Eval(ctx, `local cur = redis.call('GET', KEYS[1])
if cur == false or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0`, []string{gaugesKey()}, who, ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("the gauges' exporter lease: %w", err)
	}
	return n == 1, nil
}
