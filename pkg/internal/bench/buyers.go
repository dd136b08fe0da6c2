package bench

// Claims as buyers send them: each of N distinct users claims once, over
// keep-alive connections, closed loop, with stock for all of them and one
// worker persisting; the bare net/http handler answers as many requests
// in the same run. What a claim costs the gateway and Redis, its latency,
// and the goroutines the runtime scheduled for it, each beside the bare
// handler's; with -profile, the account of where the gateway's CPU goes.

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/pkg/internal/harness"
)

// BuyersRun is the buyers' rows.
type BuyersRun struct {
	Users   int           `json:"users_per_level"`
	Workers int           `json:"workers"`
	Levels  []BuyersLevel `json:"levels"`
}

// BuyersLevel is one concurrency level: the bare handler and the gateway.
type BuyersLevel struct {
	Conns   int        `json:"conns"`
	Bare    BuyersSide `json:"bare"`
	Gateway BuyersSide `json:"gateway"`
	// RedisUs is redis-server's CPU per admitted claim until persisted;
	// RedisCommands splits it by command (the rest is the network and
	// the event loop).
	RedisUs       float64       `json:"redis_us_per_claim"`
	RedisCommands []CommandCost `json:"redis_commands,omitempty"`
	ClaimsPerCall float64       `json:"claims_per_call"`
	// Account is a request's CPU by part, when the run took profiles
	// (-profile).
	Account []AccountLine `json:"account,omitempty"`
}

// BuyersSide is one server's figures in a level.
type BuyersSide struct {
	Measure
	CPUus float64 `json:"cpu_us_per_request"`
	// Scheduled is how many times the process's runtime scheduled a
	// goroutine to run, per request: go_sched_latencies_seconds_count
	// times eight (the runtime records one transition in eight of each
	// goroutine's), an estimate.
	Scheduled float64 `json:"goroutines_scheduled_per_request"`
	// Created is the goroutines created per request, counted exactly.
	Created float64 `json:"goroutines_created_per_request"`
	// RunSeconds and CPUSeconds: the load's length and the process's
	// CPU over it; Profiled, with -profile, the share of that CPU the
	// profile's samples saw in their window.
	RunSeconds float64 `json:"run_s"`
	CPUSeconds float64 `json:"cpu_s"`
	Profiled   float64 `json:"profiled_share,omitempty"`
}

const buyersWorkers = 1

// schedTracked is the period at which the runtime samples a goroutine's
// transitions into its scheduling latencies (runtime's gTrackingPeriod).
const schedTracked = 8

// schedCount reads how many times a process's runtime has scheduled a
// goroutine (estimated from the sampled latencies' count) and created
// one, from its /metrics.
func schedCount(opsURL string) (scheduled, created float64, err error) {
	const lat, made = "go_sched_latencies_seconds_count", "go_sched_goroutines_created_goroutines_total"
	m, err := scrapeGauges(opsURL+"/metrics", []string{lat, made})
	return m[lat] * schedTracked, m[made], err
}

// sideRun drives load at a server and measures its CPU and schedulings;
// with profileTo, a CPU profile of its first profileFor (a profile that
// outlasts the load adds the idle process's few samples: the account
// uses shares of the samples, scaled to the CPU /proc measured).
func sideRun(pid int, opsURL string, l Load, profileTo, pprofURL string, profileFor time.Duration) (BuyersSide, *Result, error) {
	s0, m0, err := schedCount(opsURL)
	if err != nil {
		return BuyersSide{}, nil, err
	}
	p0, err := procCPU(pid)
	if err != nil {
		return BuyersSide{}, nil, err
	}
	var prof <-chan error
	if profileTo != "" {
		prof = profile(pprofURL, profileFor, profileTo)
	}
	r := Drive(l)
	if prof != nil {
		if err := <-prof; err != nil {
			return BuyersSide{}, nil, err
		}
	}
	p1, err := procCPU(pid)
	if err != nil {
		return BuyersSide{}, nil, err
	}
	s1, m1, err := schedCount(opsURL)
	if err != nil {
		return BuyersSide{}, nil, err
	}
	if r.Requests == 0 {
		return BuyersSide{}, nil, fmt.Errorf("no requests answered")
	}
	n := float64(r.Requests)
	return BuyersSide{Measure: measure("", "closed", l.Conns, 0, r), CPUus: float64((p1 - p0).Microseconds()) / n,
		Scheduled: (s1 - s0) / n, Created: (m1 - m0) / n, RunSeconds: r.Duration.Seconds(), CPUSeconds: (p1 - p0).Seconds()}, r, nil
}

// buyersRuns measures the buyers' rows at each of cfg.Conns.
func buyersRuns(ctx context.Context, s *harness.Stack, cfg Config, tokens []string, host, trivialAddr, trivialOps string, trivialPid int) (*BuyersRun, error) {
	rc, _ := s.RDB.Client().(*redis.Client)
	if rc == nil {
		return nil, fmt.Errorf("the buyers' rows need a single redis-server")
	}
	users := cfg.Buyers
	if users <= 0 || users > len(tokens) {
		return nil, fmt.Errorf("buyers: %d users, %d tokens signed", users, len(tokens))
	}
	w, err := s.StartWorkerWith("buyers")
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop(30 * time.Second) }()
	if err := waitReady(w); err != nil {
		return nil, err
	}
	out := &BuyersRun{Users: users, Workers: buyersWorkers}
	for _, conns := range cfg.Conns {
		profiling := cfg.ProfileDir != ""
		var bareProf, gwProf string
		if profiling {
			bareProf = filepath.Join(cfg.ProfileDir, fmt.Sprintf("bare-buyers-%d.cpu.pprof", conns))
			gwProf = filepath.Join(cfg.ProfileDir, fmt.Sprintf("gateway-buyers-%d.cpu.pprof", conns))
		}
		lv := BuyersLevel{Conns: conns}
		bareReq := Request(trivialAddr, "/", "x")
		lv.Bare, _, err = sideRun(trivialPid, "http://"+trivialOps, Load{Addr: trivialAddr, Conns: conns, Duration: time.Hour,
			MaxRequests: int64(users), Next: func(int64) []byte { return bareReq }}, bareProf, "http://"+trivialOps, cfg.Duration)
		if err != nil {
			return nil, fmt.Errorf("buyers, bare handler, %d conns: %w", conns, err)
		}
		lv.Bare.Name = "bare net/http handler"
		v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "buyers", Stock: int64(users), PerUserLimit: 1})
		if err != nil {
			return nil, err
		}
		path := "/v1/vouchers/" + strconv.FormatInt(v, 10) + "/orders"
		u0, err := readRedisUse(ctx, rc)
		if err != nil {
			return nil, err
		}
		var r *Result
		lv.Gateway, r, err = sideRun(s.Gateway.Pid(), s.Gateway.OpsURL, Load{Addr: host, Conns: conns, Duration: time.Hour,
			MaxRequests: int64(users), Next: func(i int64) []byte { return Request(host, path, tokens[i]) }}, gwProf, s.Gateway.PprofURL, cfg.Duration)
		if err != nil {
			return nil, fmt.Errorf("buyers, gateway, %d conns: %w", conns, err)
		}
		lv.Gateway.Name = fmt.Sprintf("%d buyers, one claim each", users)
		admitted := r.Status[202]
		if admitted != int64(users) {
			return nil, fmt.Errorf("buyers, %d conns: %d of %d claims admitted: %v", conns, admitted, users, r.Status)
		}
		if err := waitDrained(ctx, s, 2*time.Minute); err != nil {
			return nil, fmt.Errorf("buyers, %d conns: %w", conns, err)
		}
		u1, err := readRedisUse(ctx, rc)
		if err != nil {
			return nil, err
		}
		lv.RedisUs, lv.RedisCommands, lv.ClaimsPerCall = u0.perClaim(u1, admitted)
		cfg.logf("buyers, %d conns: gateway %.0f claims/s p50 %s p99 %s, %.1f µs (%.2f × bare %.1f), %.1f goroutines scheduled and %.2f created a claim (bare %.1f, %.2f); redis %.1f µs a claim, %.1f claims a call; bare %.0f req/s p99 %s",
			conns, lv.Gateway.RPS, us(lv.Gateway.P50us), us(lv.Gateway.P99us), lv.Gateway.CPUus, lv.Gateway.CPUus/lv.Bare.CPUus, lv.Bare.CPUus,
			lv.Gateway.Scheduled, lv.Gateway.Created, lv.Bare.Scheduled, lv.Bare.Created, lv.RedisUs, lv.ClaimsPerCall, lv.Bare.RPS, us(lv.Bare.P99us))
		if profiling {
			bare, bs, err := profileShares(bareProf)
			if err != nil {
				return nil, err
			}
			gw, gs, err := profileShares(gwProf)
			if err != nil {
				return nil, err
			}
			lv.Account = accountOf(bare, gw, lv.Bare.CPUus, lv.Gateway.CPUus)
			lv.Bare.Profiled, lv.Gateway.Profiled = coverage(bs, lv.Bare, cfg.Duration), coverage(gs, lv.Gateway, cfg.Duration)
		}
		out.Levels = append(out.Levels, lv)
	}
	return out, nil
}
