package gateway

import (
	"context"
	"net"
	"time"
)

// WithPruneClock replaces the monotonic clock of sold-out pruning
// (nanoseconds), for tests.
func WithPruneClock(now func() int64) Option { return withPruneClock(now) }

// WithRoomTick refreshes the rooms served every d instead of roomTick:
// a gateway whose rooms' states lag another's.
func WithRoomTick(d time.Duration) Option { return func(g *Gateway) { g.roomTick = d } }

// ServeWithAdmin is Run on listeners of the caller's: the public handler
// on public, the admin API on admin (FLASHSALE_ADMIN_ADDR).
func (g *Gateway) ServeWithAdmin(ctx context.Context, public, admin net.Listener) error {
	return g.serve(ctx, listener{public, g.Handler(), "public"}, listener{admin, g.AdminHandler(), "admin"})
}

// HoldBuyersMySQL takes every one of the buyers' MySQL slots, as buyers'
// reads that saturate them do; release gives them back.
func (g *Gateway) HoldBuyersMySQL() (release func()) {
	n := cap(g.mysqlSlots)
	for range n {
		g.mysqlSlots <- struct{}{}
	}
	return func() {
		for range n {
			<-g.mysqlSlots
		}
	}
}

// HoldBuyersInflight fills the buyers' in-flight bound, as buyers' claims
// that saturate it do; release empties it.
func (g *Gateway) HoldBuyersInflight() (release func()) {
	n := int64(g.cfg.MaxInflight)
	g.inflight.Add(n)
	return func() { g.inflight.Add(-n) }
}
