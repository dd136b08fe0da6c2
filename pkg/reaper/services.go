package reaper

import (
	"context"
	"reflect"
	"time"

	"go.uber.org/zap"
)

// A service is one maintenance job of the reaper, in a file of its own
// with its own interval, a bounded round, and a result type of its own
// that says what a round did (as River's maintenance services and asynq's
// recoverer and janitor). services lists them all, in the order RunOnce
// runs them; docs/ARCHITECTURE.md's table says what each does (a doccheck
// test holds the two together).
type service struct {
	name     string
	interval time.Duration
	// round runs one round and returns what it did: the value of the
	// service's result type.
	round func(ctx context.Context) (any, error)
}

// newService returns the service name, whose round is run, every
// interval. Each round starts from a zero R, which run counts into; the
// round's R is also kept in *into when into is not nil.
func newService[R any](name string, interval time.Duration, run func(context.Context, *R) error, into *R) service {
	return service{name: name, interval: interval, round: func(ctx context.Context) (any, error) {
		var res R
		err := run(ctx, &res)
		if into != nil {
			*into = res
		}
		return res, err
	}}
}

// services are the reaper's services, in the order RunOnce runs them, each
// keeping its last round's result in its field of into.
func (r *Reaper) services(into *Results) []service {
	return []service{
		newService("rescuer", r.cfg.RescueInterval, r.rescue, &into.Rescuer),
		newService("consumers", r.cfg.ConsumersInterval, r.removeGoneConsumers, &into.Consumers),
		newService("expirer", r.cfg.ExpireInterval, r.cancelExpired, &into.Expirer),
		newService("releaser", r.cfg.ReleaseInterval, r.releaseOwed, &into.Releaser),
		newService("refunder", r.cfg.RefundInterval, r.refundEnded, &into.Refunder),
		newService("drawer", r.cfg.RefundInterval, r.drawEnded, &into.Drawer),
		newService("mover", r.cfg.ReleaseInterval, r.finishMoves, &into.Mover),
		newService("restorer", r.cfg.ReleaseInterval, r.restore, &into.Restorer),
		newService("trimmer", r.cfg.ReleaseInterval, r.trim, &into.Trimmer),
		newService("sweeper", r.cfg.SweepInterval, r.sweep, &into.Sweeper),
		newService("checker", r.cfg.CheckInterval, r.check, nil),
		newService("sequencer", r.cfg.EventsInterval, r.sequenceEvents, &into.Sequencer),
		newService("detector", r.cfg.DetectInterval, r.detectHot, &into.Detector),
		newService("splitter", r.cfg.DetectInterval, r.splitOwed, &into.Splitter),
	}
}

// Results is what a round of each service did (RunOnce, RunOnly): a field
// for each service that counts something, named after it, of the
// service's own result type. The checker counts nothing: what it finds, it
// logs and exports as metrics.
type Results struct {
	Rescuer   RescuerResult
	Consumers ConsumersResult
	Expirer   ExpirerResult
	Releaser  ReleaserResult
	Refunder  RefunderResult
	Drawer    DrawerResult
	Mover     MoverResult
	Restorer  RestorerResult
	Trimmer   TrimmerResult
	Sweeper   SweeperResult
	Sequencer SequencerResult
	Detector  DetectorResult
	Splitter  SplitterResult
}

// counted is a result with metrics of its own, counted once a round.
type counted interface {
	count(m *metrics)
}

// logFields are a result's counts that are not 0, each under its field's
// log tag (a tag "-": counted, not logged).
func logFields(res any) []zap.Field {
	var fields []zap.Field
	v := reflect.ValueOf(res)
	if v.Kind() != reflect.Struct {
		return nil
	}
	for i := range v.NumField() {
		if key := v.Type().Field(i).Tag.Get("log"); key != "-" && v.Field(i).Int() != 0 {
			fields = append(fields, zap.Int(key, int(v.Field(i).Int())))
		}
	}
	return fields
}
