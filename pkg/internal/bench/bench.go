package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/persist"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/sale"
)

// Config of a benchmark run.
type Config struct {
	Dir            string
	Conns          []int         // gateway and ceiling concurrency levels
	Duration       time.Duration // each throughput measurement
	DrainOrders    int           // orders pre-filled for the worker drain
	BaselineOrders int           // orders for the one-transaction-per-order baseline
	E2EClaims      int
	E2EUsers       int
	E2EStock       int
	Self           string // this program, re-run with -trivial to serve the HTTP ceiling
	Log            io.Writer
	// ProfileDir, if set, receives CPU profiles of the gateway (64-connection
	// admitted run) and of a worker (two-worker drain).
	ProfileDir string
	// CPUOnly runs only the CPU-per-claim rows and the scale-out run.
	CPUOnly bool
	// AdmittedOnly runs only the admitted claims end to end (the CPU
	// rows with workers running).
	AdmittedOnly bool
	// BuyersOnly runs only the buyers' rows: Buyers distinct users, one
	// claim each, at each level of Conns, beside the bare handler.
	BuyersOnly bool
	Buyers     int
	// OpenOnly runs only the open-ended sale: OpenClaims claims from
	// OpenBuyers buyers over OpenSale.
	OpenOnly   bool
	OpenSale   time.Duration
	OpenClaims int
	OpenBuyers int
	// DurabilityOnly runs only the durability rows (none vs replica).
	DurabilityOnly bool
	// DrawOnly runs only the draw rows; DrawEntries and DrawStock size the
	// draw measured.
	DrawOnly               bool
	DrawEntries, DrawStock int
	// RoomOnly runs only the waiting room's rows; RoomWaiters joins that
	// many to one room for its memory figure.
	RoomOnly    bool
	RoomWaiters int
	// MemoryOnly measures only a fresh gateway's memory after E2EUsers
	// distinct users.
	MemoryOnly bool
	// DrainOnly runs only the worker drain rows.
	DrainOnly bool
	// EventsOnly runs only the events rows: the relay's cost an event to
	// one sink alone, and an event's time from commit to sink in a sale.
	EventsOnly bool
	// SplitOnly runs only the split row: a hot voucher on one bucket of a
	// 3-master cluster, split by itself while it sells.
	SplitOnly bool
	// SplitHeld: the split row's claims while it splits, as a share of
	// one master's rate before (0: a third).
	SplitHeld float64
	// FreezeOnly runs only the freeze row: claims through a 2 s Redis
	// freeze, every answer held to MySQL.
	FreezeOnly bool
	// TailOnly runs only the sold-out tail rows (one bucket and two)
	// beside another voucher's claims.
	TailOnly bool
	// Env is added to the environment of the stacks' processes (FLASHSALE_*
	// settings to compare, e.g. FLASHSALE_REDIS_PIPELINE_WORKERS=2).
	Env []string
}

// Measure is one throughput and latency measurement.
type Measure struct {
	Name     string           `json:"name"`
	Conns    int              `json:"conns"`
	Mode     string           `json:"mode"` // closed | open
	Rate     int              `json:"target_rate,omitempty"`
	RPS      float64          `json:"rps"`
	P50us    int64            `json:"p50_us"`
	P90us    int64            `json:"p90_us"`
	P99us    int64            `json:"p99_us"`
	P999us   int64            `json:"p999_us"`
	Status   map[string]int64 `json:"status"`
	Errors   int64            `json:"errors"`
	Requests int64            `json:"requests"`
}

func measure(name, mode string, conns, rate int, r *Result) Measure {
	m := Measure{Name: name, Mode: mode, Conns: conns, Rate: rate, RPS: r.RPS(), Errors: r.Errors, Requests: r.Requests,
		P50us: r.Latency.ValueAtQuantile(50), P90us: r.Latency.ValueAtQuantile(90), P99us: r.Latency.ValueAtQuantile(99),
		P999us: r.Latency.ValueAtQuantile(99.9), Status: map[string]int64{}}
	for s, n := range r.Status {
		m.Status[strconv.Itoa(s)] = n
	}
	return m
}

// Drain is a worker drain measurement.
type Drain struct {
	Name      string  `json:"name"`
	Workers   int     `json:"workers"`
	BatchSize int     `json:"batch_size"`
	Orders    int     `json:"orders"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"orders_per_s"`
	// RedisUs is Redis's CPU per persisted order while the workers drain:
	// their reads, acknowledgements and deletes.
	RedisUs float64 `json:"redis_us_per_order,omitempty"`
}

// E2E is the end-to-end sale.
type E2E struct {
	Claims, Users, Stock int
	Admitted             int64         `json:"admitted"`
	LastAdmit            time.Duration `json:"last_202_ns"`
	LastPersisted        time.Duration `json:"last_persisted_ns"`
	PersistLag           time.Duration `json:"persist_after_last_202_ns"`
	MaxBacklog           int64         `json:"max_stream_backlog"`
	Violations           []string      `json:"violations"`
	Windows              []Window      `json:"windows"`
	Backlog              []int64       `json:"backlog_per_window"`
	Claim                Measure       `json:"claims"`
}

// Report is a whole run.
type Report struct {
	When         time.Time       `json:"when"`
	Machine      string          `json:"machine"`
	Env          []string        `json:"env,omitempty"`
	HTTPCeiling  []Measure       `json:"http_ceiling"`
	RedisCeiling []Measure       `json:"redis_ceiling"`
	Gateway      []Measure       `json:"gateway"`
	Drain        []Drain         `json:"drain"`
	E2E          E2E             `json:"e2e"`
	CPU          []CPUMeasure    `json:"cpu_per_claim"`
	ScaleOut     []ScaleOut      `json:"scale_out"`
	Split        *SplitRun       `json:"split,omitempty"`
	Freeze       *Freezes        `json:"freeze,omitempty"`
	Durability   []DurabilityRun `json:"durability,omitempty"`
	WaitCost     []WaitCost      `json:"wait_cost,omitempty"`
	Draw         *DrawRun        `json:"draw,omitempty"`
	Room         *RoomRun        `json:"room,omitempty"`
	Memory       *MemoryRun      `json:"memory,omitempty"`
	Relay        *RelayRun       `json:"relay,omitempty"`
	Buyers       *BuyersRun      `json:"buyers,omitempty"`
	OpenSale     *OpenSaleRun    `json:"open_sale,omitempty"`
	Events       *EventsRun      `json:"events,omitempty"`
	Proof        *ProofCheck     `json:"proof_of_work,omitempty"`
	Access       *AccessCheck    `json:"access_code,omitempty"`
	GatewayRSS   int64           `json:"gateway_peak_rss_bytes"`
	WorkerRSS    int64           `json:"worker_peak_rss_bytes"`
}

func (c Config) logf(format string, args ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
}

// Run runs every measurement in one go on throwaway servers.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	rep := &Report{When: time.Now().UTC(), Machine: machine(), Env: cfg.Env}
	pc := proofCheck(20_000) // before any server runs: the process has the machine to itself
	rep.Proof = &pc
	cfg.logf("proof-of-work check: %.1f µs CPU per check", pc.CPUMicros)
	ac := accessCheck(500_000)
	rep.Access = &ac
	cfg.logf("access-code check: %.2f µs CPU per check", ac.CPUMicros)
	if cfg.FreezeOnly {
		f, err := freezeRun(ctx, cfg)
		rep.Freeze = f
		return rep, err
	}
	if cfg.OpenOnly {
		o, err := openSale(ctx, cfg)
		rep.OpenSale = o
		return rep, err
	}
	if cfg.SplitOnly {
		return rep, clusterRun(ctx, cfg, func(s *harness.Stack) error {
			sp, err := splitRun(ctx, s, cfg)
			rep.Split = &sp
			return err
		})
	}
	s, err := harness.StartStack(ctx, harness.Options{Dir: cfg.Dir, Workers: 0, Partitions: 8,
		Env: append([]string{"FLASHSALE_AUDIT_LOG=false", "FLASHSALE_LOG_LEVEL=warn", "FLASHSALE_CLAIM_TIMEOUT=2s", "FLASHSALE_PPROF=true"}, cfg.Env...)})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	host := strings.TrimPrefix(s.URL, "http://")

	maxReq := int(cfg.Duration.Seconds()*60000) + 10000
	cfg.logf("signing %d user tokens", maxReq)
	tokens := make([]string, max(maxReq, cfg.E2EUsers))
	for i := range tokens {
		tokens[i] = s.Token("u" + strconv.Itoa(i))
	}

	if cfg.DurabilityOnly {
		return rep, durabilityRuns(ctx, cfg, s.JWTSecret, tokens, rep)
	}
	if cfg.TailOnly {
		return rep, tailRuns(ctx, s, cfg, tokens, host, rep)
	}
	if cfg.DrawOnly {
		return rep, draws(ctx, s, cfg, tokens, host, rep)
	}
	if cfg.MemoryOnly {
		m, err := memoryRun(ctx, s, cfg, tokens, host)
		rep.Memory = &m
		return rep, err
	}
	if cfg.DrainOnly {
		return rep, drainRuns(ctx, s, cfg, rep)
	}
	if cfg.EventsOnly {
		rep.Events, err = eventsRuns(ctx, s, cfg, tokens, host)
		return rep, err
	}

	// 1. HTTP ceiling.
	port, err := testsrv.FreePort()
	if err != nil {
		return nil, err
	}
	trivialAddr := "127.0.0.1:" + strconv.Itoa(port)
	opsPort, err := testsrv.FreePort()
	if err != nil {
		return nil, err
	}
	trivialOps := "127.0.0.1:" + strconv.Itoa(opsPort)
	trivial := exec.Command(cfg.Self, "-trivial", trivialAddr, "-trivial-ops", trivialOps)
	testsrv.DieWithParent(trivial)
	if err := trivial.Start(); err != nil {
		return nil, err
	}
	defer func() { _ = trivial.Process.Kill(); _ = trivial.Wait() }()
	time.Sleep(300 * time.Millisecond)
	if cfg.AdmittedOnly {
		rep.CPU, err = admittedEndToEnd(ctx, s, cfg, tokens, host, trivialAddr, trivial.Process.Pid)
		return rep, err
	}
	if cfg.BuyersOnly {
		rep.Buyers, err = buyersRuns(ctx, s, cfg, tokens, host, trivialAddr, trivialOps, trivial.Process.Pid)
		return rep, err
	}
	if cfg.RoomOnly {
		return rep, roomRuns(ctx, s, cfg, tokens, host, trivialAddr, trivial.Process.Pid, rep)
	}
	for _, c := range cfg.Conns {
		if cfg.CPUOnly {
			break
		}
		req := Request(trivialAddr, "/", "x")
		r := Drive(Load{Addr: trivialAddr, Conns: c, Duration: cfg.Duration, Next: func(int64) []byte { return req }})
		rep.HTTPCeiling = append(rep.HTTPCeiling, measure("trivial net/http handler", "closed", c, 0, r))
		cfg.logf("HTTP ceiling, %d conns: %.0f req/s", c, r.RPS())
	}
	if rep.CPU, err = cpuPerClaim(ctx, s, cfg, tokens, host, trivialAddr, trivial.Process.Pid); err != nil {
		return nil, err
	}
	e2e, err := admittedEndToEnd(ctx, s, cfg, tokens, host, trivialAddr, trivial.Process.Pid)
	if err != nil {
		return nil, err
	}
	rep.CPU = append(rep.CPU, e2e...)
	if !cfg.CPUOnly {
		if rep.Buyers, err = buyersRuns(ctx, s, cfg, tokens, host, trivialAddr, trivialOps, trivial.Process.Pid); err != nil {
			return nil, err
		}
	}
	_ = trivial.Process.Kill()
	if cfg.CPUOnly {
		if err := hotDrain(ctx, s, cfg, "one Redis", rep); err != nil {
			return nil, err
		}
		rep.ScaleOut, err = scaleOutRuns(ctx, cfg, rep)
		return rep, err
	}

	// 2. Redis ceiling: the admission script alone.
	for _, c := range cfg.Conns {
		for _, pipelined := range []int{1, 32} {
			v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "redis ceiling", Stock: 10_000_000, PerUserLimit: 1})
			if err != nil {
				return nil, err
			}
			ops := redisCeiling(ctx, s, v, c, pipelined, cfg.Duration)
			name := "admission script, unpipelined"
			if pipelined > 1 {
				name = fmt.Sprintf("admission script, pipelines of %d", pipelined)
			}
			rep.RedisCeiling = append(rep.RedisCeiling, Measure{Name: name, Conns: c, Mode: "closed", RPS: ops})
			cfg.logf("Redis ceiling, %d conns, pipeline %d: %.0f admissions/s", c, pipelined, ops)
			if err := resetStreams(ctx, s); err != nil {
				return nil, err
			}
		}
	}

	// 3. Gateway admission (no workers running: the gateway and Redis alone).
	claim := func(v int64, offset int64) func(int64) []byte {
		path := "/v1/vouchers/" + strconv.FormatInt(v, 10) + "/orders"
		return func(i int64) []byte { return Request(host, path, tokens[(offset+i)%int64(len(tokens))]) }
	}
	var closed64 float64
	for _, stock := range []int64{10_000_000, 100} {
		for _, c := range cfg.Conns {
			v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "gateway", Stock: stock, PerUserLimit: 1})
			if err != nil {
				return nil, err
			}
			var prof <-chan error
			if cfg.ProfileDir != "" && stock > 100 && c == cfg.Conns[0] {
				prof = profile(s.Gateway.PprofURL, cfg.Duration/2, filepath.Join(cfg.ProfileDir, "gateway.cpu.pprof"))
			}
			r := Drive(Load{Addr: host, Conns: c, Duration: cfg.Duration, Next: claim(v, 0)})
			if prof != nil {
				if err := <-prof; err != nil {
					return nil, err
				}
			}
			name := "gateway claims, stock plenty (admitted)"
			if stock == 100 {
				name = "gateway claims, stock 100 (sold out)"
			}
			rep.Gateway = append(rep.Gateway, measure(name, "closed", c, 0, r))
			cfg.logf("%s, %d conns: %.0f claims/s, p99 %s, status %v", name, c, r.RPS(), us(r.Latency.ValueAtQuantile(99)), r.Status)
			if stock > 100 && c == cfg.Conns[0] {
				closed64 = r.RPS()
			}
			if err := resetStreams(ctx, s); err != nil {
				return nil, err
			}
		}
	}
	// Open loop at 80% of the closed-loop rate: latency without the
	// generator waiting on the server.
	rate := int(closed64 * 0.8)
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "gateway open", Stock: 10_000_000, PerUserLimit: 1})
	if err != nil {
		return nil, err
	}
	r := Drive(Load{Addr: host, Conns: cfg.Conns[0], Duration: cfg.Duration, Rate: rate, Next: claim(v, 0)})
	rep.Gateway = append(rep.Gateway, measure("gateway claims, stock plenty (admitted)", "open", cfg.Conns[0], rate, r))
	cfg.logf("gateway open loop at %d/s, %d conns: p50 %s p99 %s p99.9 %s", rate, cfg.Conns[0], us(r.Latency.ValueAtQuantile(50)), us(r.Latency.ValueAtQuantile(99)), us(r.Latency.ValueAtQuantile(99.9)))
	if err := resetStreams(ctx, s); err != nil {
		return nil, err
	}
	// A bot beside honest users: honest claims in open loop at half the
	// closed-loop rate, alone and then with one user hammering from 16
	// connections at once (FLASHSALE_USER_RATE answers it 429 before the
	// admission script runs).
	honestRate := max(1, int(closed64*0.5))
	for _, withBot := range []bool{false, true} {
		v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "honest", Stock: 10_000_000, PerUserLimit: 1})
		if err != nil {
			return nil, err
		}
		botReq := Request(host, "/v1/vouchers/"+strconv.FormatInt(v, 10)+"/orders", s.Token("bot"))
		var bot *Result
		botDone := make(chan struct{})
		if withBot {
			go func() {
				defer close(botDone)
				bot = Drive(Load{Addr: host, Conns: 16, Duration: cfg.Duration, Next: func(int64) []byte { return botReq }})
			}()
		} else {
			close(botDone)
		}
		r := Drive(Load{Addr: host, Conns: cfg.Conns[0], Duration: cfg.Duration, Rate: honestRate, Next: claim(v, 0)})
		<-botDone
		name := "honest claims, no bot"
		if withBot {
			name = "honest claims beside a bot"
		}
		rep.Gateway = append(rep.Gateway, measure(name, "open", cfg.Conns[0], honestRate, r))
		cfg.logf("%s, open loop at %d/s: p50 %s p99 %s, status %v", name, honestRate, us(r.Latency.ValueAtQuantile(50)), us(r.Latency.ValueAtQuantile(99)), r.Status)
		if withBot {
			rep.Gateway = append(rep.Gateway, measure("the bot: one user, back to back", "closed", 16, 0, bot))
			cfg.logf("bot, 16 conns: %.0f req/s, status %v", bot.RPS(), bot.Status)
		}
		if err := resetStreams(ctx, s); err != nil {
			return nil, err
		}
	}

	// A sold-out tail beside another sale, one bucket and two.
	if err := tailRuns(ctx, s, cfg, tokens, host, rep); err != nil {
		return nil, err
	}

	// Red envelope grabs beside unit claims: the largest pool (100,000
	// envelopes), and exactly as many grabs (or fewer, if the duration
	// ends first), so every answer is a grab, none a sold_out.
	for _, c := range cfg.Conns {
		v, err := s.CreateVoucher(ctx, spec("gateway envelopes", "envelope", sale.MaxEnvelopes))
		if err != nil {
			return nil, err
		}
		r := Drive(Load{Addr: host, Conns: c, Duration: cfg.Duration, MaxRequests: sale.MaxEnvelopes, Next: claim(v, 0)})
		rep.Gateway = append(rep.Gateway, measure("gateway envelope grabs, 100,000 envelopes (admitted)", "closed", c, 0, r))
		cfg.logf("gateway envelope grabs, %d conns: %.0f grabs/s, p99 %s, status %v", c, r.RPS(), us(r.Latency.ValueAtQuantile(99)), r.Status)
		if err := resetStreams(ctx, s); err != nil {
			return nil, err
		}
	}
	if rep.GatewayRSS, err = PeakRSS(s.Gateway.Pid()); err != nil {
		return nil, err
	}

	// 4. Worker drain.
	if err := drainRuns(ctx, s, cfg, rep); err != nil {
		return nil, err
	}
	if rep.Events, err = eventsRuns(ctx, s, cfg, tokens, host); err != nil {
		return nil, err
	}

	// 5. End to end with two workers.
	if rep.E2E, err = endToEnd(ctx, s, cfg, tokens, host); err != nil {
		return nil, err
	}
	// 6. A hot voucher on one master and on three.
	if err := hotDrain(ctx, s, cfg, "one Redis", rep); err != nil {
		return nil, err
	}
	if rep.ScaleOut, err = scaleOutRuns(ctx, cfg, rep); err != nil {
		return nil, err
	}
	// 7. A draw sale: entries beside claims, a million entries drawn and
	// verified (last: its million rows stay in MySQL).
	if err := draws(ctx, s, cfg, tokens, host, rep); err != nil {
		return nil, err
	}
	// 8. FLASHSALE_REDIS_DURABILITY none and replica, on a Redis with a replica.
	return rep, durabilityRuns(ctx, cfg, s.JWTSecret, tokens, rep)
}

// draws runs the draw rows unless cfg.DrawEntries is 0.
func draws(ctx context.Context, s *harness.Stack, cfg Config, tokens []string, host string, rep *Report) error {
	if cfg.DrawEntries <= 0 {
		return nil
	}
	d, err := drawRun(ctx, s, cfg, tokens, host)
	if err != nil {
		return fmt.Errorf("draw: %w", err)
	}
	rep.Draw = &d
	return nil
}

// profile fetches a CPU profile of d from a process's pprof listener into path.
func profile(pprofURL string, d time.Duration, path string) <-chan error {
	done := make(chan error, 1)
	go func() {
		done <- download(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", pprofURL, max(1, int(d.Seconds()))), path)
	}()
	return done
}

// download writes what url answers to the file path.
func download(url, path string) error {
	res, err := http.Get(url)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, res.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func us(v int64) string { return (time.Duration(v) * time.Microsecond).String() }

func machine() string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		mem = strings.Fields(strings.SplitN(string(b), "\n", 2)[0])[1] + " kB RAM"
	}
	redisV, _ := exec.Command("redis-server", "--version").Output()
	mariaV, _ := exec.Command(lookup("mariadbd"), "--version").Output()
	return fmt.Sprintf("%d CPUs (%s), %s, %s, %s, %s", runtime.NumCPU(), cpu, mem, runtime.Version(),
		strings.TrimSpace(string(redisV)), strings.TrimSpace(string(mariaV)))
}

func lookup(name string) string {
	p, err := testsrv.LookPath(name)
	if err != nil {
		return name
	}
	return p
}

// redisCeiling runs the admission script directly from conns clients, in
// pipelines of pipe (1: unpipelined), for d, and returns admissions/s.
func redisCeiling(ctx context.Context, s *harness.Stack, v int64, conns, pipe int, d time.Duration) float64 {
	_, rate := scriptRun(ctx, s.RDB.Client().(*redis.Client), s.RDB.Partitions(), v, conns, pipe, 0, d)
	return rate
}

// resetStreams empties every partition's stream (entries no worker will
// read) and its backlog count, and makes the groups again.
func resetStreams(ctx context.Context, s *harness.Stack) error {
	for p := range s.RDB.Partitions() {
		if err := s.RDB.Client().Del(ctx, rdb.StreamKey(p), rdb.BacklogKey(p)).Err(); err != nil {
			return err
		}
	}
	return s.RDB.EnsureGroups(ctx)
}

// drainRuns measures the worker drain rows: orders admitted straight into
// the stream while the workers are stopped, then drained.
func drainRuns(ctx context.Context, s *harness.Stack, cfg Config, rep *Report) error {
	for _, d := range []struct {
		kind                   string
		workers, batch, orders int
		name                   string
	}{
		{"units", 1, persist.BatchSizeDefault, cfg.DrainOrders, "batched (default)"},
		{"units", 2, persist.BatchSizeDefault, cfg.DrainOrders, "batched (default)"},
		{"units", 2, 100, cfg.DrainOrders, "batches of 100 (the default before)"},
		{"units", 1, 1, cfg.BaselineOrders, "one transaction per order (baseline)"},
		{"units", 2, 1, cfg.BaselineOrders, "one transaction per order (baseline)"},
		{"envelope", 2, persist.BatchSizeDefault, min(cfg.DrainOrders, sale.MaxEnvelopes), "envelope grabs, batched (default)"},
	} {
		prof := ""
		if cfg.ProfileDir != "" && d.workers == 2 && d.batch > 1 && d.kind == "units" {
			prof = filepath.Join(cfg.ProfileDir, "worker.cpu.pprof")
		}
		res, rss, err := drain(ctx, s, d.kind, 1, d.workers, d.batch, d.orders, prof)
		if err != nil {
			return err
		}
		res.Name = d.name
		rep.Drain = append(rep.Drain, res)
		rep.WorkerRSS = max(rep.WorkerRSS, rss)
		cfg.logf("drain, %d workers, batch %d: %d orders in %.2fs = %.0f orders/s", d.workers, d.batch, d.orders, res.Seconds, res.PerSecond)
	}
	var err error
	rep.Relay, err = relayRun(ctx, s, cfg)
	return err
}
