package voucher

import (
	"time"

	"github.com/flashsale/flashsale/pkg/db"
)

// A voucher's state, as the admin API (its "state") and the console show
// it: one answer to "where does this sale stand", from MySQL's row.
const (
	StateScheduled = "scheduled" // before starts_at
	StateOnSale    = "on_sale"
	StatePaused    = "paused"
	StateSoldOut   = "sold_out" // nothing left in MySQL: units given back by cancels and expiries reopen it
	StateEnded     = "ended"    // past ends_at
)

// State is where v's sale stands at now: ended past its end, whatever
// else; then paused; then scheduled before its start; then sold out when
// MySQL holds no unit of it (a draw's entries take none: a draw is on
// sale until its end); else on sale.
func State(v db.Voucher, now time.Time) string {
	switch {
	case v.EndsAt != nil && !now.Before(*v.EndsAt):
		return StateEnded
	case v.Paused:
		return StatePaused
	case v.StartsAt != nil && now.Before(*v.StartsAt):
		return StateScheduled
	case v.Stock <= 0 && !v.IsDraw():
		return StateSoldOut
	}
	return StateOnSale
}
