package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/flashsale/flashsale/pkg/internal/harness"
)

// freezeRun is the freeze row: a sale of one claim per user from 64
// connections through a 2 s freeze of its Redis (SIGSTOP), on a stack
// with a worker persisting, at the gateway's default timeouts. Every
// answer is held to MySQL once the pipeline drained: answered,
// outcome_unknown, resolved through the claim ids, misled (must be 0).
func freezeRun(ctx context.Context, cfg Config) (*harness.FreezeReport, error) {
	s, err := harness.StartStack(ctx, harness.Options{Dir: cfg.Dir + "/freeze", Workers: 1, Partitions: 8, Reaper: true,
		Env: append([]string{"FLASHSALE_AUDIT_LOG=false", "FLASHSALE_LOG_LEVEL=warn", "FLASHSALE_USER_RATE=0"}, cfg.Env...)})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "freeze", Stock: 10_000_000, PerUserLimit: 1})
	if err != nil {
		return nil, err
	}
	rep, err := s.SaleThroughFreezes(ctx, harness.FreezeConfig{Voucher: v, Conns: 64, Freezes: []time.Duration{2 * time.Second}})
	if err != nil {
		return nil, err
	}
	cfg.logf("freeze: answers %v, outcome_unknown %d, resolved %d, misled %d", rep.Answers, rep.OutcomeUnknown, rep.Resolved, len(rep.Misled))
	if len(rep.Misled) > 0 {
		return rep, fmt.Errorf("freeze: %d answers were not the truth:\n%s", len(rep.Misled), strings.Join(rep.Misled, "\n"))
	}
	return rep, nil
}
