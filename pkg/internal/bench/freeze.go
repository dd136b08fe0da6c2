package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
)

// Freezes are the freeze rows: a sale of one claim per user from 64
// connections through a 2 s freeze of its Redis (SIGSTOP); the same with
// each buyer sending two claims at once (a double-click, per-user limit
// 1, many in one millisecond); and a partition (Redis's network
// namespace dropping every packet) longer than
// FLASHSALE_CLAIM_OUTCOME_TIMEOUT and a second, which leaves claims'
// calls in the gateway kernel's send queue to arrive past their
// horizon. Each on a stack with a worker persisting, every answer held
// to MySQL once the pipeline drained: answered, outcome_unknown,
// resolved through the claim ids, misled (must be 0).
type Freezes struct {
	Freeze    *harness.FreezeReport `json:"freeze"`
	Twice     *harness.FreezeReport `json:"freeze_twice,omitempty"`
	Partition *harness.FreezeReport `json:"freeze_partition,omitempty"`
	// NoPartition says why the partition row was not run (not root).
	NoPartition string `json:"no_partition,omitempty"`
}

// partitionOutcome is FLASHSALE_CLAIM_OUTCOME_TIMEOUT in the partition
// row, and partitionFor the cut: past a claim's horizon (the timeout
// after it, rounded up to a second) and the second's margin.
const (
	partitionOutcome = 5 * time.Second
	partitionFor     = 8 * time.Second
)

func freezeRun(ctx context.Context, cfg Config) (*Freezes, error) {
	out := &Freezes{}
	run := func(name string, o harness.Options, fc freezeConfig) (*harness.FreezeReport, error) {
		o.Dir, o.Workers, o.Partitions, o.Reaper = cfg.Dir+"/"+name, 1, 8, true
		o.Env = append(append([]string{"FLASHSALE_AUDIT_LOG=false", "FLASHSALE_LOG_LEVEL=warn", "FLASHSALE_USER_RATE=0"}, o.Env...), cfg.Env...)
		s, err := harness.StartStack(ctx, o)
		if err != nil {
			return nil, err
		}
		defer s.Close()
		v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: name, Stock: 10_000_000, PerUserLimit: 1})
		if err != nil {
			return nil, err
		}
		sale := fc.FreezeConfig
		sale.Voucher, sale.Conns = v, 64
		if fc.Freeze != nil {
			sale.Freeze = func(d time.Duration) error { return fc.Freeze(s, d) }
		}
		rep, err := s.SaleThroughFreezes(ctx, sale)
		if err != nil {
			return nil, err
		}
		cfg.logf("%s: answers %v, outcome_unknown %d, resolved %d, misled %d", name, rep.Answers, rep.OutcomeUnknown, rep.Resolved, len(rep.Misled))
		if len(rep.Misled) > 0 {
			return rep, fmt.Errorf("%s: %d answers were not the truth:\n%s", name, len(rep.Misled), strings.Join(rep.Misled, "\n"))
		}
		return rep, nil
	}
	var err error
	two := []time.Duration{2 * time.Second}
	if out.Freeze, err = run("freeze", harness.Options{}, freezeConfig{FreezeConfig: harness.FreezeConfig{Freezes: two}}); err != nil {
		return out, err
	}
	if out.Twice, err = run("freeze-twice", harness.Options{}, freezeConfig{FreezeConfig: harness.FreezeConfig{Freezes: two, Twice: true}}); err != nil {
		return out, err
	}
	if why := testsrv.NetnsUnavailable(); why != "" {
		out.NoPartition = why
		cfg.logf("partition row not run: %s", why)
		return out, nil
	}
	out.Partition, err = run("partition", harness.Options{RedisNetns: true, Env: []string{"FLASHSALE_CLAIM_OUTCOME_TIMEOUT=" + partitionOutcome.String()}},
		freezeConfig{FreezeConfig: harness.FreezeConfig{Freezes: []time.Duration{partitionFor}}, Freeze: func(s *harness.Stack, d time.Duration) error {
			if err := s.RedisNet.Cut(); err != nil {
				return err
			}
			time.Sleep(d) // the fault's length, not a wait for anything
			return s.RedisNet.Heal()
		}})
	return out, err
}

// freezeConfig is a row's sale, with its fault on the row's stack.
type freezeConfig struct {
	harness.FreezeConfig
	Freeze func(s *harness.Stack, d time.Duration) error
}
