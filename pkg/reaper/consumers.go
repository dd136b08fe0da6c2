package reaper

// The consumer remover: consumers of the group that are gone (idle, with
// nothing pending) are removed, so the group does not grow with every pod.

import (
	"context"
	"errors"

	"go.uber.org/zap"
)

// removeGoneConsumers removes, on every partition, the consumers idle for
// ConsumerGoneAfter with nothing pending (checked and done atomically in
// Redis: XGROUP DELCONSUMER would drop what is still pending).
func (r *Reaper) removeGoneConsumers(ctx context.Context, round *Round) error {
	var errs []error
	for p := range r.redis.Partitions() {
		removed, err := r.streams.RemoveGoneConsumers(ctx, p, r.cfg.ConsumerGoneAfter, r.cfg.Consumer)
		for _, name := range removed {
			r.log.Info("consumer removed", zap.Int("partition", p), zap.String("removed", name))
		}
		round.ConsumersRemoved += len(removed)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
