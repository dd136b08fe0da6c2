// Command demo runs a flash sale end to end on this machine: it starts
// throwaway redis-server and mariadbd (unless FLASHSALE_REDIS_ADDR /
// FLASHSALE_MYSQL_DSN name existing ones), builds and starts the gateway and
// two workers as processes, sells a voucher to many concurrent users, waits
// until every admitted order is in MySQL, prints a report and stops
// everything. It exits 1 if any invariant is violated.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/flashsale/flashsale/pkg/internal/harness"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		users       = flag.Int("users", 20000, "distinct users")
		requests    = flag.Int("requests", 50000, "claims in all (beyond -users, repeats by the same users)")
		kind        = flag.String("kind", "units", "kind of sale: units, envelope (red envelopes) or codes")
		stock       = flag.Int64("stock", 1000, "units on sale (envelopes: how many; codes: how many)")
		amount      = flag.Int64("amount", 0, "envelopes: the total amount split, in cents (default 100 per envelope)")
		perUser     = flag.Int64("per-user", 1, "units one user may hold")
		concurrency = flag.Int("concurrency", 64, "claims in flight at once")
		workers     = flag.Int("workers", 2, "worker processes")
		keep        = flag.Bool("keep", false, "keep the temporary directory (logs, data)")
		allocation  = flag.String("allocation", "first_come", "first_come, or draw: entries until -window, then winners drawn by the reaper and verified")
		window      = flag.Duration("window", 20*time.Second, "a draw's entry window, from its creation (the entries must be over by then)")
		waitingRoom = flag.Bool("waiting-room", false, "a sale behind a waiting room (-users people, -fast of them scripted to poll and claim as fast as they can), then the same crowd without one: the fast clients' share of the stock both ways")
		fast        = flag.Int("fast", 50, "with -waiting-room: scripted fast clients")
		admitRate   = flag.Int64("admit-per-second", 100, "with -waiting-room: the room's admissions per second")
		prequeue    = flag.Duration("prequeue", 5*time.Second, "with -waiting-room: the pre-queue")
		pass        = flag.Duration("pass", 10*time.Second, "with -waiting-room: a pass's life")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dir, err := os.MkdirTemp("", "flashsale-demo-")
	if err != nil {
		return err
	}
	if !*keep {
		defer os.RemoveAll(dir)
	}
	opts := harness.Options{Dir: dir, Workers: *workers, RedisAddr: os.Getenv("FLASHSALE_REDIS_ADDR"), MySQLDSN: os.Getenv("FLASHSALE_MYSQL_DSN")}
	say("starting redis-server, mariadbd, the gateway and %d workers (in %s)", *workers, dir)
	s, err := harness.StartStack(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		if err := s.Close(); err != nil {
			say("stopping: %v", err)
		}
	}()
	if *waitingRoom {
		if !isSet("stock") {
			*stock = 500
		}
		return demoRoom(ctx, s, harness.RoomConfig{Stock: *stock, Users: *users, Fast: *fast, AdmitPerSecond: *admitRate,
			Prequeue: *prequeue, Pass: *pass, Arrivals: 3 * time.Second, NoShow: 0.1, Conns: 256, Seed: uint64(time.Now().UnixNano())}, dir)
	}
	if *allocation == "draw" {
		return demoDraw(ctx, s, harness.DrawConfig{Kind: *kind, Stock: *stock, Users: *users, Requests: *requests,
			Concurrency: *concurrency, Window: *window, Seed: uint64(time.Now().UnixNano())}, dir)
	}
	if *allocation != "first_come" {
		return fmt.Errorf("-allocation must be first_come or draw, not %q", *allocation)
	}
	spec := harness.VoucherSpec{Name: "demo", Kind: *kind, PerUserLimit: *perUser}
	switch *kind {
	case "units":
		spec.Stock = *stock
	case "envelope":
		spec.Count, spec.TotalAmount = *stock, cmp.Or(*amount, 100**stock)
	case "codes":
		spec.Codes = harness.Codes(int(*stock))
	default:
		return fmt.Errorf("-kind must be units, envelope or codes, not %q", *kind)
	}
	v, err := s.CreateVoucher(ctx, spec)
	if err != nil {
		return err
	}
	say("voucher %d (%s): %d on sale, %d per user; %d claims from %d users, %d at a time", v, *kind, *stock, *perUser, *requests, *users, *concurrency)
	watch := s.WatchPersisted(ctx, v)
	sale, err := s.RunSale(ctx, harness.SaleConfig{VoucherID: v, Users: *users, Requests: *requests, Concurrency: *concurrency, Seed: uint64(time.Now().UnixNano())})
	if err != nil {
		return err
	}
	say("sale over in %s; waiting for the workers", sale.Duration.Round(time.Millisecond))
	persistedAt, err := watch.Wait(ctx, sale.Admitted, 2*time.Minute)
	if err != nil {
		return err
	}
	report, err := s.Check(ctx, v, sale)
	if err != nil {
		return err
	}
	report.PersistedAt = persistedAt
	fmt.Println()
	report.Print(os.Stdout)
	fmt.Println()
	if v := report.Violations(); len(v) > 0 {
		return fmt.Errorf("%d invariants violated (logs in %s, kept)", len(v), dir)
	}
	return nil
}

// demoDraw runs a draw sale and prints its report.
func demoDraw(ctx context.Context, s *harness.Stack, cfg harness.DrawConfig, dir string) error {
	if cfg.Kind != "units" && cfg.Kind != "codes" {
		return fmt.Errorf("a draw is of units or codes, not %q", cfg.Kind)
	}
	say("draw sale (%s): %d on sale; %d entries tried by %d users, %d at a time; entries close in %s", cfg.Kind, cfg.Stock, cfg.Requests, cfg.Users, cfg.Concurrency, cfg.Window)
	report, err := s.RunDraw(ctx, cfg)
	if report != nil && report.Sale != nil {
		fmt.Println()
		report.Print(os.Stdout)
		fmt.Println()
	}
	if err != nil {
		return err
	}
	if v := report.Violations(); len(v) > 0 {
		for _, x := range v {
			say("violated: %s", x)
		}
		return fmt.Errorf("%d invariants violated (logs in %s)", len(v), dir)
	}
	return nil
}

// demoRoom runs the room sale, then the same crowd on a sale without a
// room, and prints both reports and the comparison.
func demoRoom(ctx context.Context, s *harness.Stack, cfg harness.RoomConfig, dir string) error {
	say("waiting room: %d users (%d fast) for %d units, %d admitted/s, pre-queue %s", cfg.Users, cfg.Fast, cfg.Stock, cfg.AdmitPerSecond, cfg.Prequeue)
	on, err := s.RunRoom(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Println()
	on.Print(os.Stdout)
	fmt.Println()
	say("the same crowd, no waiting room")
	cfg.NoRoom = true
	off, err := s.RunRoom(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Println()
	off.Print(os.Stdout)
	fmt.Println()
	say("fast clients (%d of %d users) won %.2f %% of the stock with the room, %.2f %% without", cfg.Fast, cfg.Users, 100*on.FastShare, 100*off.FastShare)
	violated := append(on.Violations(), off.Violations()...)
	for _, x := range violated {
		say("violated: %s", x)
	}
	if len(violated) > 0 {
		return fmt.Errorf("%d invariants violated (logs in %s)", len(violated), dir)
	}
	return nil
}

// isSet reports whether flag name was given.
func isSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func say(format string, args ...any) {
	fmt.Printf("%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}
