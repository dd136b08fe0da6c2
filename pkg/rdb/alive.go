package rdb

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
