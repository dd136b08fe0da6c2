package voucher

import (
	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/db"
)

// LogActions logs each of actions, recorded with a change of a voucher,
// as one line at Info: the action its msg, then the voucher, who did it,
// and the fields it changed before and after. The admin API and the
// reaper's commands log a change through here, so every operator action
// has the same line wherever it was made.
func LogActions(log *zap.Logger, actions []db.Action) {
	for _, a := range actions {
		log.Info(a.Action, zap.Int64("voucher_id", a.VoucherID), zap.String("by", string(a.Actor)),
			zap.String("before", a.Before), zap.String("after", a.After))
	}
}
