package bench

import (
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/proof"
)

// ProofCheck is the CPU one proof-of-work verification costs the gateway
// (pkg/proof's Verify, what a claim with X-Flashsale-Proof runs before the
// admission script), measured in this process: CPU time (getrusage) over
// many checks of one solved challenge, on one goroutine.
type ProofCheck struct {
	Checks        int     `json:"checks"`
	CPUMicros     float64 `json:"cpu_us_per_check"`
	MaxNumber     int64   `json:"max_number"`
	SolveMicros   float64 `json:"go_solve_us"` // solving it in Go, as a client would (one sample)
	TargetMicros  float64 `json:"target_us"`
	WithinTarget  bool    `json:"within_target"`
	VerifyFailure string  `json:"verify_failure,omitempty"`
}

// proofCheck measures n verifications at the default difficulty.
func proofCheck(n int) ProofCheck {
	pc := ProofCheck{Checks: n, MaxNumber: gateway.PowMaxNumberDefault, TargetMicros: 20}
	iss := proof.New([]byte("bench-proof-key-bench-proof-key-bench!"), time.Hour, time.Now)
	c, err := iss.Challenge("u1", 1, pc.MaxNumber)
	if err != nil {
		pc.VerifyFailure = err.Error()
		return pc
	}
	t0 := time.Now()
	sol, err := proof.Solve(c)
	pc.SolveMicros = float64(time.Since(t0).Microseconds())
	if err != nil {
		pc.VerifyFailure = err.Error()
		return pc
	}
	before := cpuNow()
	for range n {
		if _, err := iss.Verify(sol, "u1", 1); err != nil {
			pc.VerifyFailure = err.Error()
			return pc
		}
	}
	pc.CPUMicros = float64((cpuNow() - before).Microseconds()) / float64(n)
	pc.WithinTarget = pc.CPUMicros <= pc.TargetMicros
	return pc
}

// cpuNow is this process's CPU time so far (user and system).
func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func (r *Report) printProof(w io.Writer) {
	if r.Proof == nil {
		return
	}
	p := r.Proof
	if p.VerifyFailure != "" {
		fmt.Fprintf(w, "\nproof-of-work check: failed: %s\n", p.VerifyFailure)
		return
	}
	fmt.Fprintf(w, "\nproof-of-work check (pkg/proof, in process, %d checks): %.1f µs CPU per check (target ≤ %.0f µs); a Go client solved one of difficulty %d in %.0f ms\n",
		p.Checks, p.CPUMicros, p.TargetMicros, p.MaxNumber, p.SolveMicros/1000)
}
