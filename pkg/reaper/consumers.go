package reaper

// The consumer remover: consumers of the group that are gone (idle, with
// nothing pending) are removed, so the group does not grow with every pod.

import (
	"context"
	"errors"

	"go.uber.org/zap"
)

// ConsumersResult is what a round of the consumer remover did.
type ConsumersResult struct {
	// ConsumersRemoved are the consumers removed from the group.
	ConsumersRemoved int `log:"consumers_removed"`
}

func (c ConsumersResult) count(m *metrics) { m.consumersRemoved.Add(float64(c.ConsumersRemoved)) }

// removeGoneConsumers removes, on every partition, the consumers idle for
// ConsumerGoneAfter with nothing pending (checked and done atomically in
// Redis: XGROUP DELCONSUMER would drop what is still pending).
func (r *Reaper) removeGoneConsumers(ctx context.Context, res *ConsumersResult) error {
	var errs []error
	for p := range r.redis.Partitions() {
		removed, err := r.streams.RemoveGoneConsumers(ctx, p, r.cfg.ConsumerGoneAfter, r.cfg.Consumer)
		for _, name := range removed {
			r.log.Info("consumer removed", zap.Int("partition", p), zap.String("removed", name))
		}
		res.ConsumersRemoved += len(removed)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
