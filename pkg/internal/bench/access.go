package bench

import (
	"fmt"
	"io"

	"github.com/flashsale/flashsale/pkg/access"
)

// AccessCheck is the CPU one access-code check costs the gateway
// (pkg/access's Valid, what a claim or a join with X-Flashsale-Access runs
// before Redis), measured in this process: CPU time (getrusage) over many
// checks of one code, on one goroutine.
type AccessCheck struct {
	Checks       int     `json:"checks"`
	CPUMicros    float64 `json:"cpu_us_per_check"`
	TargetMicros float64 `json:"target_us"`
	WithinTarget bool    `json:"within_target"`
	Failure      string  `json:"failure,omitempty"`
}

// accessCheck measures n checks of a valid code.
func accessCheck(n int) AccessCheck {
	ac := AccessCheck{Checks: n, TargetMicros: 2}
	codes := access.New([]byte("bench-access-key-bench-access-key!"))
	code := codes.Code(12345, "user-0001")
	before := cpuNow()
	for range n {
		if !codes.Valid(code, 12345, "user-0001") {
			ac.Failure = "a valid code was refused"
			return ac
		}
	}
	ac.CPUMicros = float64((cpuNow() - before).Nanoseconds()) / 1000 / float64(n)
	ac.WithinTarget = ac.CPUMicros <= ac.TargetMicros
	return ac
}

func (r *Report) printAccess(w io.Writer) {
	if r.Access == nil {
		return
	}
	a := r.Access
	if a.Failure != "" {
		fmt.Fprintf(w, "\naccess-code check: failed: %s\n", a.Failure)
		return
	}
	fmt.Fprintf(w, "access-code check (pkg/access, in process, %d checks): %.2f µs CPU per check (target ≤ %.0f µs)\n",
		a.Checks, a.CPUMicros, a.TargetMicros)
}
