package gateway

import (
	"context"
	"net"
)

// WithPruneClock replaces the monotonic clock of sold-out pruning
// (nanoseconds), for tests.
func WithPruneClock(now func() int64) Option { return withPruneClock(now) }

// ServeWithAdmin is Run on listeners of the caller's: the public handler
// on public, the admin API on admin (FLASHSALE_ADMIN_ADDR).
func (g *Gateway) ServeWithAdmin(ctx context.Context, public, admin net.Listener) error {
	return g.serve(ctx, listener{public, g.Handler(), "public"}, listener{admin, g.AdminHandler(), "admin"})
}
