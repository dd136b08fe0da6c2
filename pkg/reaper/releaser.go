package reaper

// The releaser: the units MySQL took back are given back to Redis, exactly
// once each (see pkg/settle).

import (
	"context"

	"github.com/flashsale/flashsale/pkg/settle"
)

// ReleaserResult is what a round of the releaser did.
type ReleaserResult struct {
	// ReleasedToRedis are the releases Redis got (of cancellations and
	// failures).
	ReleasedToRedis int `log:"released_to_redis"`
}

func (rr ReleaserResult) count(m *metrics) { m.released.Add(float64(rr.ReleasedToRedis)) }

// releaseOwed gives Redis the units MySQL has taken back (cancellations,
// and failures whose worker died before releasing), exactly once each (see
// pkg/settle).
func (r *Reaper) releaseOwed(ctx context.Context, res *ReleaserResult) error {
	n, err := settle.Owed(ctx, r.redis, r.db, r.cfg.BatchSize, r.cfg.MaxPerRound, r.now)
	res.ReleasedToRedis = n
	return err
}
