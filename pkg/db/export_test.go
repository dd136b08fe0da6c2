package db

import (
	"context"
	"time"
)

// WriteEventRow writes one outbox row of n events, as a change's
// transaction does, for the tests that need rows of a given size.
func (s *Store) WriteEventRow(ctx context.Context, firstOrder int64, n int) error {
	orders := make([]Order, n)
	now := time.Now().UTC()
	for k := range orders {
		orders[k] = Order{ID: firstOrder + int64(k), VoucherID: 1, UserID: "u", Quantity: 1, Status: "created", CreatedAt: now, ExpiresAt: now}
	}
	return insertEvents(s.db.WithContext(ctx), orders, "")
}
