package bench

// The account of a request's CPU: a CPU profile of a process under load,
// its samples given to the part of the program that owns them, scaled to
// the process's CPU per request measured from /proc over the same run.

import (
	"fmt"
	"os"
	"strings"
	"time"

	pprofile "github.com/google/pprof/profile"
)

// AccountLine is one part of a request's CPU, on the bare handler and on
// the gateway, in microseconds a request.
type AccountLine struct {
	Part      string  `json:"part"`
	BareUs    float64 `json:"bare_us"`
	GatewayUs float64 `json:"gateway_us"`
}

// owner gives a stack frame's function to a part of the program; the
// first rule a frame matches, walking from the leaf towards the root,
// owns the sample; the generic rules (net/http's own code, bufio) only
// when no other rule matches a frame of the stack, so that what a handler
// asks of net/http (routing, writing its headers) is the handler's. Socket reads and writes are parted from the code that
// asked for them (their cost is the kernel's), the scheduler's work from
// whoever woke or parked a goroutine, the collector's from the
// allocations that pay it.
var owners = []struct{ match, part string }{
	{"runtime.gcBgMarkWorker", "garbage collection"},
	{"runtime.gcAssistAlloc", "garbage collection"},
	{"runtime.bgsweep", "garbage collection"},
	{"runtime.bgscavenge", "garbage collection"},
	{"runtime.gcStart", "garbage collection"},
	{"runtime.schedule", "scheduler: parking, waking, switching goroutines"},
	{"runtime.findRunnable", "scheduler: parking, waking, switching goroutines"},
	{"runtime.park_m", "scheduler: parking, waking, switching goroutines"},
	{"runtime.goready", "scheduler: parking, waking, switching goroutines"},
	{"runtime.ready", "scheduler: parking, waking, switching goroutines"},
	{"runtime.wakep", "scheduler: parking, waking, switching goroutines"},
	{"runtime.netpoll", "scheduler: parking, waking, switching goroutines"},
	{"runtime.futex", "scheduler: parking, waking, switching goroutines"},
	{"runtime.notesleep", "scheduler: parking, waking, switching goroutines"},
	{"runtime.mcall", "scheduler: parking, waking, switching goroutines"},
	{"runtime.gopark", "scheduler: parking, waking, switching goroutines"},
	{"runtime.goexit0", "scheduler: parking, waking, switching goroutines"},
	{"runtime.newproc", "scheduler: parking, waking, switching goroutines"},
	{"runtime.sysmon", "clock reads, timers, sysmon"},
	{"runtime.runtimer", "clock reads, timers, sysmon"},
	{"runtime.(*timers)", "clock reads, timers, sysmon"},
	{"time.", "clock reads, timers, sysmon"},
	{"internal/poll.(*FD).Read", "socket reads (kernel)"},
	{"internal/poll.(*FD).Write", "socket writes (kernel)"},
	{"internal/poll.(*FD).Accept", "socket reads (kernel)"},
	{"github.com/flashsale/flashsale/pkg/token.", "token check"},
	{"github.com/golang-jwt/", "token check"},
	{"crypto/", "token check"},
	{"github.com/flashsale/flashsale/pkg/ratelimit.", "rate limits"},
	{"github.com/prometheus/", "metrics"},
	{"github.com/flashsale/flashsale/pkg/gateway.(*Gateway).countClaim", "metrics"},
	{"github.com/flashsale/flashsale/pkg/history.", "metrics"},
	{"github.com/redis/go-redis/v9/internal/proto.(*Writer)", "go-redis: encoding the call"},
	{"github.com/redis/go-redis/v9/internal/proto.(*Reader)", "go-redis: decoding the reply"},
	{"github.com/redis/go-redis/v9", "go-redis: pipeline, pool, commands"},
	{"github.com/flashsale/flashsale/pkg/rdb.(*Batcher)", "batcher: gathering, handing off, answering"},
	{"github.com/flashsale/flashsale/pkg/rdb.(*replyTimer)", "batcher: gathering, handing off, answering"},
	{"github.com/flashsale/flashsale/pkg/rdb.", "rdb: the call's arguments, the reply's fields"},
	{"github.com/flashsale/flashsale/pkg/gateway.admittedBody", "the answer's body and headers"},
	{"github.com/flashsale/flashsale/pkg/gateway.(*Gateway).answerAdmitted", "the answer's body and headers"},
	{"github.com/flashsale/flashsale/pkg/internal/bench.ServeTrivial", "the answer's body and headers"},
	{"github.com/flashsale/flashsale/pkg/gateway/httpapi.", "the answer's body and headers"},
	{"github.com/flashsale/flashsale/pkg/gateway.(*Gateway).shed", "shedding, routing, the claim's checks"},
	{"github.com/flashsale/flashsale/pkg/gateway.", "shedding, routing, the claim's checks"},
	{"net/http.(*ServeMux)", "shedding, routing, the claim's checks"},
	{"github.com/flashsale/flashsale/pkg/", "other flashsale code"},
	{"go.uber.org/zap", "other flashsale code"},
}

// generic is what owns a sample no rule of owners claims.
var generic = []struct{ match, part string }{
	{"net/http.", "net/http: parsing the request, writing the response"},
	{"bufio.", "net/http: parsing the request, writing the response"},
	{"net/textproto.", "net/http: parsing the request, writing the response"},
}

// parts is the order the account prints its lines in.
var parts = []string{
	"net/http: parsing the request, writing the response",
	"socket reads (kernel)",
	"socket writes (kernel)",
	"scheduler: parking, waking, switching goroutines",
	"garbage collection",
	"clock reads, timers, sysmon",
	"shedding, routing, the claim's checks",
	"token check",
	"rate limits",
	"batcher: gathering, handing off, answering",
	"rdb: the call's arguments, the reply's fields",
	"go-redis: encoding the call",
	"go-redis: decoding the reply",
	"go-redis: pipeline, pool, commands",
	"the answer's body and headers",
	"metrics",
	"other flashsale code",
	"other",
}

// profileShares reads a CPU profile and returns each part's share of its
// samples, and the CPU time the samples cover.
func profileShares(path string) (map[string]float64, float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	p, err := pprofile.Parse(f)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			idx = i
		}
	}
	if idx < 0 {
		return nil, 0, fmt.Errorf("%s: not a CPU profile", path)
	}
	by := map[string]float64{}
	var total float64
	for _, s := range p.Sample {
		v := float64(s.Value[idx])
		total += v
		by[ownerOf(s)] += v
	}
	if total == 0 {
		return nil, 0, fmt.Errorf("%s: no samples", path)
	}
	for k := range by {
		by[k] /= total
	}
	return by, total / 1e9, nil
}

// ownerOf is the part a sample belongs to: the first frame from its leaf
// that an owner rule matches.
func ownerOf(s *pprofile.Sample) string {
	for _, rules := range [][]struct{ match, part string }{owners, generic} {
		for _, loc := range s.Location {
			// A location's lines are innermost first (inlined calls).
			for _, l := range loc.Line {
				if l.Function == nil {
					continue
				}
				for _, o := range rules {
					if strings.HasPrefix(l.Function.Name, o.match) {
						return o.part
					}
				}
			}
		}
	}
	return "other"
}

// accountOf turns two processes' profile shares (profileShares) into µs
// a request, given each one's CPU per request measured over its run.
func accountOf(bare, gw map[string]float64, bareUs, gatewayUs float64) []AccountLine {
	var out []AccountLine
	for _, part := range parts {
		b, g := bare[part]*bareUs, gw[part]*gatewayUs
		if b == 0 && g == 0 {
			continue
		}
		out = append(out, AccountLine{Part: part, BareUs: b, GatewayUs: g})
	}
	return out
}

// coverage is the share of a process's CPU its profile's samples saw:
// sampled seconds over the CPU it used in the profile's window (its CPU
// rate over the run, times the window, the shorter of the profile and
// the run). The rest is CPU the profiler's signal did not land in (in
// the kernel, mostly); the account assumes it is shared as the samples
// are.
func coverage(sampled float64, side BuyersSide, profiled time.Duration) float64 {
	if side.RunSeconds <= 0 || side.CPUSeconds <= 0 {
		return 0
	}
	window := min(profiled.Seconds(), side.RunSeconds)
	return sampled / (side.CPUSeconds / side.RunSeconds * window)
}
