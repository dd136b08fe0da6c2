package reaper

// The releaser: the units MySQL took back are given back to Redis, exactly
// once each (see pkg/settle).

import (
	"context"

	"github.com/flashsale/flashsale/pkg/settle"
)

// releaseOwed gives Redis the units MySQL has taken back (cancellations,
// and failures whose worker died before releasing), exactly once each (see
// pkg/settle).
func (r *Reaper) releaseOwed(ctx context.Context, round *Round) error {
	n, err := settle.Owed(ctx, r.redis, r.db, r.cfg.BatchSize, r.cfg.MaxPerRound, r.now)
	round.ReleasedToRedis += n
	return err
}
