// Command bench measures flashsale on this machine in one run (make bench):
// the HTTP and Redis ceilings, the gateway, the workers' drain, an end-to-end
// sale and peak memory. It prints a table and writes JSON and an SVG chart.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flashsale/flashsale/pkg/internal/bench"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		trivial  = flag.String("trivial", "", "serve the HTTP ceiling's handler on this address (used by bench itself)")
		trivOps  = flag.String("trivial-ops", "", "with -trivial: serve /metrics and /debug/pprof/ on this address (used by bench itself)")
		out      = flag.String("out", "bench-results", "directory for the JSON and SVG results")
		conns    = flag.String("conns", "64,256", "concurrency levels")
		duration = flag.Duration("duration", 10*time.Second, "each throughput measurement")
		drain    = flag.Int("drain-orders", 200_000, "orders pre-filled for the worker drain")
		baseline = flag.Int("baseline-orders", 20_000, "orders for the one-transaction-per-order baseline")
		claims   = flag.Int("e2e-claims", 1_000_000, "end-to-end claims")
		users    = flag.Int("e2e-users", 200_000, "end-to-end distinct users")
		stock    = flag.Int("e2e-stock", 100_000, "end-to-end units")
		profDir  = flag.String("profile", "", "write CPU profiles of the gateway and a worker to this directory")
		cpuOnly  = flag.Bool("cpu-only", false, "measure only the CPU per claim and the hot voucher on one master and on three")
		durOnly  = flag.Bool("durability-only", false, "measure only the claims with FLASHSALE_REDIS_DURABILITY none and replica, and WAIT per flush")
		drawOnly = flag.Bool("draw-only", false, "measure only the draw rows: entries vs admitted claims, a large draw and its verification")
		drawN    = flag.Int("draw-entries", 1_000_000, "entries of the large draw (0: no draw rows)")
		drawS    = flag.Int("draw-stock", 10_000, "units of the large draw")
		roomOnly = flag.Bool("room-only", false, "measure only the waiting room's rows: memory per waiter, a poll's CPU, a sale behind a room")
		roomN    = flag.Int("room-waiters", 1_000_000, "waiters joined to one room for the memory figure")
		env      = flag.String("env", "", "FLASHSALE_* settings added to the stacks' processes, comma-separated (e.g. FLASHSALE_REDIS_PIPELINE_WORKERS=2)")
		memOnly  = flag.Bool("memory-only", false, "measure only a fresh gateway's peak RSS after -e2e-users distinct users' claims")
		drainOn  = flag.Bool("drain-only", false, "measure only the worker drain rows")
		evOnly   = flag.Bool("events-only", false, "measure only the order events rows: the reaper's CPU an event relaying to Kafka, then a webhook endpoint, alone; an event's time from commit to each sink in a sale at 5,000 claims/s (about 3 minutes)")
		frzOnly  = flag.Bool("freeze-only", false, "measure only the freeze row: claims through a 2 s Redis freeze, each answer held to MySQL (answered, outcome_unknown, resolved, misled)")
		tailOnly = flag.Bool("tail-only", false, "measure only the sold-out tail rows: a voucher of one bucket, then of two, sold out with units trickling back, beside another voucher's claims (its p99 and 5xx)")
		splitAt  = flag.Float64("split-held", 1.0/3, "the split row's claims, from the threshold's setting to the split done, as a share of the rate one master admitted before (the threshold is three quarters of it)")
		splitOn  = flag.Bool("split-only", false, "measure only the split row: a hot voucher on one bucket of a 3-master Redis Cluster, split by itself while it sells (admissions/s and each master's share before and after, the time from hot to split, the p99 during it)")
		openOnly = flag.Bool("open-only", false, "measure only the open-ended sale: -open-claims claims from -open-buyers buyers over -open-for, two in five paid and the rest expiring; Redis's bytes a buyer at the end, its growth a minute over the second half, and the sweep's passes")
		openFor  = flag.Duration("open-for", 10*time.Minute, "the open-ended sale's length")
		openN    = flag.Int("open-claims", 1_000_000, "the open-ended sale's claims")
		openB    = flag.Int("open-buyers", 500_000, "the open-ended sale's buyers (each claims twice, the limit)")
		buyOnly  = flag.Bool("buyers-only", false, "measure only the buyers' rows: -buyers distinct users, one claim each, at each -conns, one worker, beside the bare handler (with -profile, the account of a claim's CPU by part)")
		buyers   = flag.Int("buyers", 200_000, "distinct users of the buyers' rows, one claim each, at each -conns")
		admOnly  = flag.Bool("admitted-only", false, "measure only the admitted claims end to end: gateway and redis-server process CPU per claim with workers persisting, against the bare handler, at each -conns")
		compare  = flag.String("compare", "", "a committed run to compare with (default: docs/bench-run.json, docs/bench-cpu-batch-run.json with -cpu-only, docs/bench-run.json with -admitted-only, docs/bench-durability-run.json with -durability-only, docs/bench-draw-run.json with -draw-only, docs/bench-room-run.json with -room-only, docs/bench-drain-run.json with -drain-only, docs/bench-events-run.json with -events-only, docs/bench-split-run.json with -split-only, docs/bench-tail-run.json with -tail-only); rows over 10 % worse are flagged")
	)
	flag.Parse()
	if *trivial != "" {
		return bench.ServeTrivial(*trivial, *trivOps)
	}
	for _, kv := range splitEnv(*env) {
		if k, _, ok := strings.Cut(kv, "="); !ok || !strings.HasPrefix(k, "FLASHSALE_") {
			return fmt.Errorf("-env: %q is not FLASHSALE_NAME=value", kv)
		}
	}
	var cs []int
	for _, c := range strings.Split(*conns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil {
			return fmt.Errorf("-conns: %w", err)
		}
		cs = append(cs, n)
	}
	if *profDir != "" {
		if err := os.MkdirAll(*profDir, 0o755); err != nil {
			return fmt.Errorf("-profile: %w", err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "flashsale-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.Run(ctx, bench.Config{Dir: dir, Conns: cs, Duration: *duration, DrainOrders: *drain, BaselineOrders: *baseline,
		E2EClaims: *claims, E2EUsers: *users, E2EStock: *stock, Self: self, Log: os.Stderr, ProfileDir: *profDir, CPUOnly: *cpuOnly, DurabilityOnly: *durOnly,
		DrawOnly: *drawOnly, DrawEntries: *drawN, DrawStock: *drawS, RoomOnly: *roomOnly, RoomWaiters: *roomN, MemoryOnly: *memOnly, DrainOnly: *drainOn, EventsOnly: *evOnly, SplitOnly: *splitOn, SplitHeld: *splitAt, TailOnly: *tailOnly, FreezeOnly: *frzOnly, AdmittedOnly: *admOnly, BuyersOnly: *buyOnly, Buyers: *buyers, OpenOnly: *openOnly, OpenSale: *openFor, OpenClaims: *openN, OpenBuyers: *openB, Env: splitEnv(*env)})
	if err != nil {
		return err
	}
	fmt.Println()
	rep.Print(os.Stdout)
	base := *compare
	switch {
	case base != "":
	case *cpuOnly:
		base = "docs/bench-cpu-batch-run.json"
	case *admOnly, *buyOnly:
		base = "docs/bench-run.json"
	case *durOnly:
		base = "docs/bench-durability-run.json"
	case *drawOnly:
		base = "docs/bench-draw-run.json"
	case *roomOnly:
		base = "docs/bench-room-run.json"
	case *memOnly:
		base = "docs/bench-memory-run.json"
	case *drainOn:
		base = "docs/bench-drain-run.json"
	case *evOnly:
		base = "docs/bench-events-run.json"
	case *splitOn:
		base = "docs/bench-split-run.json"
	case *tailOnly:
		base = "docs/bench-tail-run.json"
	case *frzOnly:
		base = "docs/bench-freeze-run.json"
	default:
		base = "docs/bench-run.json"
	}
	if b, err := bench.LoadReport(base); err != nil {
		fmt.Printf("\nno comparison: %v\n", err)
	} else if n := bench.PrintChanges(os.Stdout, base, b, bench.Compare(b, rep)); n > 0 {
		fmt.Printf("%d rows more than %.0f %% worse than %s: rerun, and compare the ratios of one run, before believing it (docs/BENCHMARKS.md)\n", n, bench.Regression*100, base)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	stamp := rep.When.Format("20060102-150405")
	j, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	jsonPath := filepath.Join(*out, "bench-"+stamp+".json")
	if err := os.WriteFile(jsonPath, j, 0o644); err != nil {
		return err
	}
	fmt.Printf("\nwrote %s\n", jsonPath)
	if len(rep.E2E.Windows) == 0 {
		fmt.Println("no chart: the end-to-end run recorded no window")
	} else {
		svgPath := filepath.Join(*out, "e2e-"+stamp+".svg")
		f, err := os.Create(svgPath)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := rep.Chart(f); err != nil {
			return err
		}
		fmt.Printf("wrote %s\n", svgPath)
	}
	if len(rep.E2E.Violations) > 0 {
		return fmt.Errorf("invariants violated in the end-to-end run")
	}
	return nil
}

// splitEnv reads -env: KEY=VALUE settings, comma-separated.
func splitEnv(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
