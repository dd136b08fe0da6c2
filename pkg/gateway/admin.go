package gateway

import (
	"net/http"
	"time"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/gateway/operator"
)

// operatorAPI is the admin API (pkg/gateway/operator) as this gateway
// serves it: on the operator's MySQL pool, answering and authenticating
// as the buyers' API does.
func (g *Gateway) operatorAPI() *operator.API {
	pool := g.adminDB
	if pool == nil {
		pool = g.db
	}
	events := g.eventsDB
	if events == nil {
		events = pool
	}
	return &operator.API{DB: pool, EventsDB: events, Redis: g.redis, Rooms: g.rooms, Access: g.access, History: g.history, Refused: &g.refused, Unknown: &g.unknown,
		Claims: g.claimTotals, Replica: g.replica, Source: g.cfg.EventsSource, Now: func() time.Time { return g.now() }, Log: g.log,
		Gateway: operator.Gateway{Fail: g.fail, Admin: g.admin, EventsReader: g.eventsReader, ReadBody: g.readBody,
			Draw:         func(r *http.Request, v db.Voucher) (any, error) { return g.drawOf(r, v) },
			RoomsChanged: g.readRoomIndex, Restocked: g.soldOut.Admitted}}
}
