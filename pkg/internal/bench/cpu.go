package bench

// CPU per claim. On two cores the load generator, the gateway and Redis
// share the machine, so claims/s mostly measures how they share it. What
// a claim costs is measured here instead, from each process's own CPU
// time over a run: the gateway's (/proc/PID/stat) next to a bare net/http
// handler's in the same run, and redis-server's (INFO cpu, every thread).

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/internal/wait"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
)

// CPUMeasure is the CPU one claim costs, in microseconds.
type CPUMeasure struct {
	Name      string  `json:"name"`
	Requests  int64   `json:"requests"`
	PerSecond float64 `json:"per_second"`
	// ProcessUs is the HTTP server's CPU per request (the gateway's, or
	// the bare handler's on its own row).
	ProcessUs float64 `json:"process_us_per_request"`
	// VsBare is ProcessUs over the bare handler's, measured in the same run.
	VsBare  float64 `json:"vs_bare_handler,omitempty"`
	RedisUs float64 `json:"redis_us_per_request"`
	// Conns and P99us: the load's concurrency and its 99th percentile
	// latency, on the rows that record them.
	Conns  int     `json:"conns,omitempty"`
	P99us  float64 `json:"p99_us,omitempty"`
	Status map[string]int64
	// RedisPersistUs is, on the split row, redis-server's CPU per order
	// while the workers persisted the claims' orders (RedisUs then being
	// the admissions' part alone).
	RedisPersistUs float64 `json:"redis_persist_us_per_order,omitempty"`
	// RedisCommands splits RedisUs by command, from Redis's own
	// accounting (INFO commandstats), on the end-to-end rows; what the
	// commands do not account for is the network and the event loop.
	RedisCommands []CommandCost `json:"redis_commands,omitempty"`
	// ClaimsPerCall, on the end-to-end rows: the admitted claims over
	// Redis's EVALSHA calls, how full the batcher's calls of admit.lua
	// ran (the workers' few acknowledgements, a script call per batch of
	// hundreds of orders, are among the calls).
	ClaimsPerCall float64 `json:"claims_per_call,omitempty"`
}

// CommandCost is one Redis command's part of an admitted claim.
type CommandCost struct {
	Command string  `json:"command"`
	Calls   float64 `json:"calls_per_claim"`
	Us      float64 `json:"us_per_claim"`
}

// commandStats reads INFO commandstats: calls and microseconds per command.
func commandStats(ctx context.Context, c *redis.Client) (map[string][2]float64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	out := map[string][2]float64{}
	for _, l := range strings.Split(info, "\r\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(l, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(l, "cmdstat_") {
			continue
		}
		var calls, usec float64
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				calls, _ = strconv.ParseFloat(v, 64)
			case "usec":
				usec, _ = strconv.ParseFloat(v, 64)
			}
		}
		out[name] = [2]float64{calls, usec}
	}
	return out, nil
}

// procCPU is the CPU time process pid has used (user and system).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses: utime and
	// stime are the 12th and 13th after it, in clock ticks (100 Hz).
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// redisCPU is the CPU time one redis-server has used (INFO cpu).
func redisCPU(ctx context.Context, c *redis.Client) (time.Duration, error) {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, l := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(l, ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, err
			}
			total += x
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

// redisUse is one redis-server's CPU and its commands' counts at an
// instant (INFO cpu, INFO commandstats).
type redisUse struct {
	cpu  time.Duration
	cmds map[string][2]float64
}

func readRedisUse(ctx context.Context, c *redis.Client) (redisUse, error) {
	cpu, err := redisCPU(ctx, c)
	if err != nil {
		return redisUse{}, err
	}
	cmds, err := commandStats(ctx, c)
	return redisUse{cpu: cpu, cmds: cmds}, err
}

// perClaim is what Redis spent from u to later per admitted claim: its
// CPU, its commands of at least 0.05 µs a claim (most first), and the
// claims an EVALSHA carried.
func (u redisUse) perClaim(later redisUse, admitted int64) (us float64, cmds []CommandCost, perCall float64) {
	n := float64(admitted)
	for name, after := range later.cmds {
		calls, usec := after[0]-u.cmds[name][0], after[1]-u.cmds[name][1]
		if usec/n >= 0.05 {
			cmds = append(cmds, CommandCost{Command: name, Calls: calls / n, Us: usec / n})
		}
	}
	slices.SortFunc(cmds, func(a, b CommandCost) int { return cmp.Compare(b.Us, a.Us) })
	if calls := later.cmds["evalsha"][0] - u.cmds["evalsha"][0]; calls > 0 {
		perCall = n / calls
	}
	return float64((later.cpu - u.cpu).Microseconds()) / n, cmds, perCall
}

// cpuOf measures the CPU pid (and Redis, when redisClient is set) uses
// while load runs.
func cpuOf(ctx context.Context, name string, pid int, redisClient *redis.Client, load func() *Result) (CPUMeasure, error) {
	p0, err := procCPU(pid)
	if err != nil {
		return CPUMeasure{}, err
	}
	var r0 time.Duration
	if redisClient != nil {
		if r0, err = redisCPU(ctx, redisClient); err != nil {
			return CPUMeasure{}, err
		}
	}
	r := load()
	p1, err := procCPU(pid)
	if err != nil {
		return CPUMeasure{}, err
	}
	m := CPUMeasure{Name: name, Requests: r.Requests, PerSecond: r.RPS(), Status: map[string]int64{}}
	for s, n := range r.Status {
		m.Status[strconv.Itoa(s)] = n
	}
	if r.Requests == 0 {
		return m, fmt.Errorf("%s: no requests", name)
	}
	m.ProcessUs = float64((p1 - p0).Microseconds()) / float64(r.Requests)
	if redisClient != nil {
		r1, err := redisCPU(ctx, redisClient)
		if err != nil {
			return m, err
		}
		m.RedisUs = float64((r1 - r0).Microseconds()) / float64(r.Requests)
	}
	return m, nil
}

// MasterCPU is one master's part of a hot voucher's admissions.
type MasterCPU struct {
	Addr       string  `json:"addr"`
	Admissions int64   `json:"admissions"`
	CPUus      float64 `json:"cpu_us_per_admission"`
	CPUSeconds float64 `json:"cpu_seconds"`
}

// ScaleOut is the hot voucher's admissions on a 3-master cluster, its
// stock in one bucket (one master) or in three.
type ScaleOut struct {
	Buckets    int         `json:"stock_buckets"`
	PerSecond  float64     `json:"admissions_per_s"`
	Admissions int64       `json:"admissions"`
	Masters    []MasterCPU `json:"masters"`
}

// scaleOut drives the admission script (rdb.Store, as the gateway's
// batcher does: pipelines of 32 from conns clients) at one voucher with
// buckets buckets for d, on the cluster stack s.
func scaleOut(ctx context.Context, s *harness.Stack, buckets, conns int, d time.Duration, logf func(string, ...any)) (ScaleOut, error) {
	out := ScaleOut{Buckets: buckets}
	cc, store, err := clusterStore(ctx, s)
	if err != nil {
		return out, err
	}
	defer cc.Close()
	// A voucher whose buckets are on as many masters as it has buckets
	// (up to three): voucher ids are given by MySQL, the partitions' slots
	// by the cluster, so look for one.
	var v int64
	for try := 0; ; try++ {
		if v, err = s.CreateVoucher(ctx, harness.VoucherSpec{Name: "scale-out", Stock: 10_000_000, PerUserLimit: 1, StockBuckets: buckets}); err != nil {
			return out, err
		}
		masters := map[string]bool{}
		for _, p := range s.RDB.VoucherPartitions(v, buckets) {
			n, err := cc.MasterForKey(ctx, rdb.StreamKey(p))
			if err != nil {
				return out, err
			}
			masters[n.Options().Addr] = true
		}
		if len(masters) == min(buckets, 3) || try == 20 {
			break
		}
	}
	before, err := mastersCPU(ctx, cc)
	if err != nil {
		return out, err
	}
	perPartition := make([]atomic.Int64, s.RDB.Partitions())
	n, rate := driveAdmissions(ctx, store, v, conns, 32, d, func(a admission.Admission) {
		p, _, _ := order.EntryOf(a.OrderID)
		perPartition[p].Add(1)
	})
	after, err := mastersCPU(ctx, cc)
	if err != nil {
		return out, err
	}
	out.Admissions, out.PerSecond = n, rate
	byMaster := map[string]int64{}
	for p := range perPartition {
		if k := perPartition[p].Load(); k > 0 {
			m, err := cc.MasterForKey(ctx, rdb.StreamKey(p))
			if err != nil {
				return out, err
			}
			byMaster[m.Options().Addr] += k
		}
	}
	for addr, t := range after {
		used := t - before[addr]
		m := MasterCPU{Addr: addr, Admissions: byMaster[addr], CPUSeconds: used.Seconds()}
		if m.Admissions > 0 {
			m.CPUus = float64(used.Microseconds()) / float64(m.Admissions)
		}
		out.Masters = append(out.Masters, m)
		logf("scale-out, %d bucket(s): master %s: %d admissions, %.2fs CPU, %.1f µs/admission", buckets, addr, m.Admissions, m.CPUSeconds, m.CPUus)
	}
	return out, nil
}

// cpuPerClaim measures, at the first concurrency level, the bare handler's
// CPU per request, then the gateway's and Redis's per claim admitted and
// per claim of a sold-out voucher (pruned in the gateway).
func cpuPerClaim(ctx context.Context, s *harness.Stack, cfg Config, tokens []string, host, trivialAddr string, trivialPid int) ([]CPUMeasure, error) {
	conns := cfg.Conns[0]
	rc, _ := s.RDB.Client().(*redis.Client)
	if rc == nil {
		return nil, fmt.Errorf("cpu per claim needs a single redis-server")
	}
	bareReq := Request(trivialAddr, "/", "x")
	bare, err := cpuOf(ctx, "bare net/http handler", trivialPid, nil, func() *Result {
		return Drive(Load{Addr: trivialAddr, Conns: conns, Duration: cfg.Duration, Next: func(int64) []byte { return bareReq }})
	})
	if err != nil {
		return nil, err
	}
	cfg.logf("CPU: bare handler %.1f µs/request (%.0f req/s)", bare.ProcessUs, bare.PerSecond)
	out := []CPUMeasure{bare}
	// The script alone, from clients sending pipelines of 32 (no HTTP, no
	// gateway): what Redis spends per admission, and the floor of any
	// script called with the same keys and arguments.
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "script cpu", Stock: 10_000_000, PerUserLimit: 1})
	if err != nil {
		return nil, err
	}
	// The floor: a script that does nothing, sent exactly what admit.lua
	// is sent for a call of 1 and of 8 claims (about what a call carries
	// through the gateway at 64 connections), 32 claims a pipeline.
	for _, per := range []int{0, 1, 8} {
		r0, err := redisCPU(ctx, rc)
		if err != nil {
			return nil, err
		}
		n, rate := scriptRun(ctx, rc, s.RDB.Partitions(), v, conns/4, 32, per, cfg.Duration)
		r1, err := redisCPU(ctx, rc)
		if err != nil {
			return nil, err
		}
		m := CPUMeasure{Name: "admission script alone, pipelines of 32", Requests: n, PerSecond: rate}
		if per > 0 {
			m.Name = fmt.Sprintf("empty script, a %d-claim call's keys and arguments", per)
		}
		if n > 0 {
			m.RedisUs = float64((r1 - r0).Microseconds()) / float64(n)
		}
		cfg.logf("CPU: %s: redis %.1f µs/admission, %.0f admissions/s", m.Name, m.RedisUs, rate)
		out = append(out, m)
		if err := resetStreams(ctx, s); err != nil {
			return nil, err
		}
	}
	for _, row := range []struct {
		name  string
		stock int64
	}{
		{"gateway claims, admitted", 10_000_000},
		{"gateway claims, sold out, after pruning", 1},
	} {
		v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: row.name, Stock: row.stock, PerUserLimit: 1})
		if err != nil {
			return nil, err
		}
		path := "/v1/vouchers/" + strconv.FormatInt(v, 10) + "/orders"
		next := func(i int64) []byte { return Request(host, path, tokens[i%int64(len(tokens))]) }
		if row.stock == 1 { // sell the unit, so every claim measured is sold out
			Drive(Load{Addr: host, Conns: 1, MaxRequests: 2, Duration: time.Second, Next: next})
		}
		var prof <-chan error
		if cfg.ProfileDir != "" && cfg.CPUOnly {
			prof = profile(s.Gateway.PprofURL, cfg.Duration/2, filepath.Join(cfg.ProfileDir, "gateway-"+strconv.FormatInt(row.stock, 10)+".cpu.pprof"))
		}
		m, err := cpuOf(ctx, row.name, s.Gateway.Pid(), rc, func() *Result {
			return Drive(Load{Addr: host, Conns: conns, Duration: cfg.Duration, Next: next})
		})
		if err != nil {
			return nil, err
		}
		if prof != nil {
			if err := <-prof; err != nil {
				return nil, err
			}
		}
		m.VsBare = m.ProcessUs / bare.ProcessUs
		cfg.logf("CPU: %s: gateway %.1f µs/claim (%.2f × bare), redis %.1f µs/claim, %.0f claims/s, status %v",
			row.name, m.ProcessUs, m.VsBare, m.RedisUs, m.PerSecond, m.Status)
		out = append(out, m)
		if err := resetStreams(ctx, s); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// endToEndWorkers is how many workers persist beside the end-to-end rows.
const endToEndWorkers = 2

// admittedEndToEnd measures what an admitted claim costs the processes users run,
// at every concurrency level, with endToEndWorkers workers persisting the
// orders beside the claims: the gateway's CPU per claim against the bare
// handler's at the same concurrency (measured just before), redis-server's
// process CPU (every thread, user and system: INFO cpu is getrusage of the
// process) from the first claim until the last order is persisted and
// acknowledged, so the workers' reads and acknowledgements and the
// kernel's socket work are in it, and the claims' p99.
func admittedEndToEnd(ctx context.Context, s *harness.Stack, cfg Config, tokens []string, host, trivialAddr string, trivialPid int) ([]CPUMeasure, error) {
	rc, _ := s.RDB.Client().(*redis.Client)
	if rc == nil {
		return nil, fmt.Errorf("end-to-end CPU needs a single redis-server")
	}
	var workers []*harness.Proc
	defer func() {
		for _, w := range workers {
			_ = w.Stop(30 * time.Second)
		}
	}()
	for i := range endToEndWorkers {
		w, err := s.StartWorkerWith(fmt.Sprintf("e2e-cpu-%d", i))
		if err != nil {
			return nil, err
		}
		workers = append(workers, w)
		if err := waitReady(w); err != nil {
			return nil, err
		}
	}
	var out []CPUMeasure
	var offset int64
	for _, conns := range cfg.Conns {
		bareReq := Request(trivialAddr, "/", "x")
		bare, err := cpuOf(ctx, fmt.Sprintf("bare net/http handler, %d conns", conns), trivialPid, nil, func() *Result {
			return Drive(Load{Addr: trivialAddr, Conns: conns, Duration: cfg.Duration, Next: func(int64) []byte { return bareReq }})
		})
		if err != nil {
			return nil, err
		}
		bare.Conns = conns
		out = append(out, bare)
		v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "end to end cpu", Stock: 10_000_000, PerUserLimit: 1})
		if err != nil {
			return nil, err
		}
		path := "/v1/vouchers/" + strconv.FormatInt(v, 10) + "/orders"
		base := offset
		next := func(i int64) []byte { return Request(host, path, tokens[(base+i)%int64(len(tokens))]) }
		g0, err := procCPU(s.Gateway.Pid())
		if err != nil {
			return nil, err
		}
		u0, err := readRedisUse(ctx, rc)
		if err != nil {
			return nil, err
		}
		var prof <-chan error
		if cfg.ProfileDir != "" && conns == cfg.Conns[0] {
			prof = profile(s.Gateway.PprofURL, cfg.Duration/2, filepath.Join(cfg.ProfileDir, "gateway-admitted-e2e.cpu.pprof"))
		}
		r := Drive(Load{Addr: host, Conns: conns, Duration: cfg.Duration, Next: next})
		if prof != nil {
			if err := <-prof; err != nil {
				return nil, err
			}
		}
		g1, err := procCPU(s.Gateway.Pid())
		if err != nil {
			return nil, err
		}
		offset += r.Requests
		if err := waitDrained(ctx, s, 2*time.Minute); err != nil {
			return nil, fmt.Errorf("end to end, %d conns: %w", conns, err)
		}
		u1, err := readRedisUse(ctx, rc)
		if err != nil {
			return nil, err
		}
		admitted := r.Status[202]
		m := CPUMeasure{Name: fmt.Sprintf("admitted claims end to end, %d conns, %d workers", conns, endToEndWorkers),
			Requests: r.Requests, PerSecond: r.RPS(), Conns: conns, P99us: float64(r.Latency.ValueAtQuantile(99)), Status: map[string]int64{}}
		for st, n := range r.Status {
			m.Status[strconv.Itoa(st)] = n
		}
		if admitted == 0 {
			return nil, fmt.Errorf("%s: nothing admitted: %v", m.Name, r.Status)
		}
		m.ProcessUs = float64((g1 - g0).Microseconds()) / float64(r.Requests)
		m.VsBare = m.ProcessUs / bare.ProcessUs
		m.RedisUs, m.RedisCommands, m.ClaimsPerCall = u0.perClaim(u1, admitted)
		for _, c := range m.RedisCommands {
			cfg.logf("  redis %s: %.3f calls, %.2f µs per admitted claim", c.Command, c.Calls, c.Us)
		}
		cfg.logf("CPU: %s: gateway %.1f µs/claim (%.2f × bare %.1f), redis %.1f µs/admitted claim, %.1f claims a call, %.0f claims/s, p99 %s, status %v",
			m.Name, m.ProcessUs, m.VsBare, bare.ProcessUs, m.RedisUs, m.ClaimsPerCall, m.PerSecond, us(int64(m.P99us)), m.Status)
		out = append(out, m)
	}
	split, err := admissionThenPersistence(ctx, s, cfg, rc, workers, tokens[offset%int64(len(tokens)):], host)
	if err != nil {
		return nil, err
	}
	return append(out, split), nil
}

// admissionThenPersistence splits redis-server's CPU per admitted claim
// into its two parts, at the first concurrency level: the claims with
// the workers stopped (the admission script and the gateway's round
// trips), then the workers persisting what they admitted (the reads and
// acknowledgements). The workers then read full batches of a backlog,
// which costs less per order than keeping up with a live sale.
func admissionThenPersistence(ctx context.Context, s *harness.Stack, cfg Config, rc *redis.Client, workers []*harness.Proc, tokens []string, host string) (CPUMeasure, error) {
	conns := cfg.Conns[0]
	m := CPUMeasure{Name: fmt.Sprintf("admitted claims, then persisted, %d conns, %d workers", conns, len(workers)), Conns: conns, Status: map[string]int64{}}
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "split cpu", Stock: 10_000_000, PerUserLimit: 1})
	if err != nil {
		return m, err
	}
	for _, w := range workers {
		if err := w.Signal(syscall.SIGSTOP); err != nil {
			return m, err
		}
	}
	stopped := true
	defer func() {
		if stopped {
			for _, w := range workers {
				_ = w.Signal(syscall.SIGCONT)
			}
		}
	}()
	path := "/v1/vouchers/" + strconv.FormatInt(v, 10) + "/orders"
	next := func(i int64) []byte { return Request(host, path, tokens[i%int64(len(tokens))]) }
	r0, err := redisCPU(ctx, rc)
	if err != nil {
		return m, err
	}
	r := Drive(Load{Addr: host, Conns: conns, Duration: cfg.Duration, Next: next})
	r1, err := redisCPU(ctx, rc)
	if err != nil {
		return m, err
	}
	for _, w := range workers {
		if err := w.Signal(syscall.SIGCONT); err != nil {
			return m, err
		}
	}
	stopped = false
	if err := waitDrained(ctx, s, 2*time.Minute); err != nil {
		return m, err
	}
	r2, err := redisCPU(ctx, rc)
	if err != nil {
		return m, err
	}
	admitted := r.Status[202]
	if admitted == 0 {
		return m, fmt.Errorf("%s: nothing admitted: %v", m.Name, r.Status)
	}
	for st, n := range r.Status {
		m.Status[strconv.Itoa(st)] = n
	}
	m.Requests, m.PerSecond, m.P99us = r.Requests, r.RPS(), float64(r.Latency.ValueAtQuantile(99))
	m.RedisUs = float64((r1 - r0).Microseconds()) / float64(admitted)
	m.RedisPersistUs = float64((r2 - r1).Microseconds()) / float64(admitted)
	cfg.logf("CPU: %s: redis %.1f µs per admission + %.1f µs per persisted order", m.Name, m.RedisUs, m.RedisPersistUs)
	return m, nil
}

// waitDrained waits until every order admitted is persisted and
// acknowledged (every stream empty, nothing pending).
func waitDrained(ctx context.Context, s *harness.Stack, limit time.Duration) error {
	return wait.Until(ctx, limit, "drained", func() (bool, string) { return s.Drained(ctx) })
}

// scaleOutRuns starts a stack on a 3-master Redis Cluster and measures a
// hot voucher with its stock in one bucket, then in three.
func scaleOutRuns(ctx context.Context, cfg Config, rep *Report) (out []ScaleOut, err error) {
	err = clusterRun(ctx, cfg, func(s *harness.Stack) error {
		out, err = scaleOutOn(ctx, s, cfg, rep)
		return err
	})
	return out, err
}

// clusterRun runs f on a stack over a 3-master Redis Cluster.
func clusterRun(ctx context.Context, cfg Config, f func(s *harness.Stack) error) error {
	s, err := harness.StartStack(ctx, harness.Options{Dir: cfg.Dir + "/cluster", Workers: 0, Partitions: 8, Cluster: true,
		Env: append([]string{"FLASHSALE_AUDIT_LOG=false", "FLASHSALE_LOG_LEVEL=warn"}, cfg.Env...)})
	if err != nil {
		return err
	}
	defer s.Close()
	return f(s)
}

// scaleOutOn measures the hot voucher's rows on the cluster stack s: one
// bucket, three, the split by itself, the drain.
func scaleOutOn(ctx context.Context, s *harness.Stack, cfg Config, rep *Report) ([]ScaleOut, error) {
	var out []ScaleOut
	for _, b := range []int{1, 3} {
		r, err := scaleOut(ctx, s, b, cfg.Conns[0], cfg.Duration, cfg.logf)
		if err != nil {
			return out, err
		}
		cfg.logf("scale-out: stock_buckets=%d: %.0f admissions/s", b, r.PerSecond)
		out = append(out, r)
		if err := s.Cluster.Client().ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return m.FlushAll(ctx).Err()
		}); err != nil {
			return out, err
		}
		if err := s.RDB.EnsureGroups(ctx); err != nil {
			return out, err
		}
	}
	sp, err := splitRun(ctx, s, cfg)
	if err != nil {
		return out, err
	}
	rep.Split = &sp
	if err := s.Cluster.Client().ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return m.FlushAll(ctx).Err()
	}); err != nil {
		return out, err
	}
	if err := s.RDB.EnsureGroups(ctx); err != nil {
		return out, err
	}
	return out, hotDrain(ctx, s, cfg, "Redis Cluster of 3 masters", rep)
}

// hotDrain measures two workers draining a hot voucher's orders spread
// over three buckets, so three partitions: each worker reads every
// partition with an XREADGROUP of its own (a cluster serves none over
// keys of several slots).
func hotDrain(ctx context.Context, s *harness.Stack, cfg Config, where string, rep *Report) error {
	orders := max(cfg.DrainOrders/4, 1000)
	d, _, err := drain(ctx, s, "units", 3, 2, 100, orders, "")
	if err != nil {
		return err
	}
	d.Name = "hot voucher over 3 buckets, " + where
	cfg.logf("drain, %s: %d orders in %.2fs = %.0f orders/s", d.Name, d.Orders, d.Seconds, d.PerSecond)
	rep.Drain = append(rep.Drain, d)
	return nil
}

// emptyScript takes what the admission script takes and does nothing.
var emptyScript = redis.NewScript("return {0, '0-0', 0, ''}")

// scriptRun runs the admission script for d from conns clients in
// pipelines of pipe claims (one call of pipe claims), each claim by a new
// user, or, per > 0, a script that does nothing, sent what admit.lua is
// sent for calls of per claims; it returns the claims that admitted (all
// claims, for the empty script) and their rate.
func scriptRun(ctx context.Context, rc *redis.Client, partitions int, v int64, conns, pipe, per int, d time.Duration) (int64, float64) {
	client := redis.NewClient(&redis.Options{Addr: rc.Options().Addr, PoolSize: conns})
	defer client.Close()
	store, _ := rdb.New(client, partitions, "")
	_ = store.Load(ctx)
	adm := admission.New(store, nil)
	if per == 0 {
		return driveAdmissions(ctx, store, v, conns, pipe, d, nil)
	}
	_ = emptyScript.Load(ctx, client).Err()
	sha := emptyScript.Hash()
	day := order.Day(time.Now(), time.UTC)
	return drive(ctx, conns, d, func(user func() string) int64 {
		p := client.Pipeline()
		claims := make([]admission.Claim, per)
		for range pipe / per {
			now := time.Now()
			for i := range claims {
				claims[i] = admission.Claim{VoucherID: v, UserID: user(), Now: now, Day: day}
			}
			_ = p.Do(ctx, append([]any{"evalsha", sha}, adm.AdmissionCall(claims)...)...)
		}
		if _, err := p.Exec(ctx); err != nil {
			return 0
		}
		return int64(pipe / per * per)
	})
}

// driveAdmissions admits claims of voucher v, each by a new user, in
// pipelines of pipe from conns clients for d; onAdmit (may be nil) sees
// each admission. It returns the admissions and their rate.
func driveAdmissions(ctx context.Context, store *rdb.Store, v int64, conns, pipe int, d time.Duration, onAdmit func(admission.Admission)) (int64, float64) {
	adm := admission.New(store, nil)
	now := time.Now()
	day := order.Day(now, time.UTC)
	return drive(ctx, conns, d, func(user func() string) int64 {
		claims := make([]admission.Claim, pipe)
		for i := range claims {
			claims[i] = admission.Claim{VoucherID: v, UserID: user(), Now: now, Day: day}
		}
		as, errs, err := adm.AdmitMany(ctx, claims)
		if err != nil {
			return 0
		}
		var n int64
		for i, e := range errs {
			if e == nil {
				n++
				if onAdmit != nil {
					onAdmit(as[i])
				}
			}
		}
		return n
	})
}

// drive runs round from conns goroutines until d is over; a round returns
// how many calls it counted, and user hands out user ids never used
// before. It returns the count and its rate.
func drive(ctx context.Context, conns int, d time.Duration, round func(user func() string) int64) (int64, float64) {
	var n, users atomic.Int64
	user := func() string { return "b" + strconv.FormatInt(users.Add(1), 10) }
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for range max(conns, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) && ctx.Err() == nil {
				n.Add(round(user))
			}
		}()
	}
	wg.Wait()
	return n.Load(), float64(n.Load()) / time.Since(start).Seconds()
}
