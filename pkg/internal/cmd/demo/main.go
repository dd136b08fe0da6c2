// Command demo runs a flash sale end to end on this machine: it starts
// throwaway redis-server and mariadbd (unless FLASHSALE_REDIS_ADDR /
// FLASHSALE_MYSQL_DSN name existing ones), builds and starts the gateway and
// two workers as processes, sells a voucher to many concurrent users, waits
// until every admitted order is in MySQL, prints a report and stops
// everything. It exits 1 if any invariant is violated. With -serve (make
// dev) it keeps the servers, the roles and the console up instead, prints
// how to reach them, and stops on Ctrl-C.
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flashsale/flashsale/pkg/backoff"
	"github.com/flashsale/flashsale/pkg/internal/harness"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	// A flag set of its own: the test helpers' flags (-redis-cluster) are
	// not the demo's.
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: make demo DEMO_FLAGS=\"[flags]\"  (or go run ./pkg/internal/cmd/demo [flags])\n\n"+
			"A flash sale end to end on throwaway servers, with a report; -serve (make dev) keeps a stack up instead.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	var (
		fg          = fs.Bool("foreground", false, "with -serve, as make dev runs it: take the terminal's foreground, so that Ctrl-C stops the stack and not make (which would exit 130)")
		serve       = fs.Bool("serve", false, "keep the servers, the gateway, the workers, the reaper and the console running, with no voucher (make dev), print their addresses, the exports that reach them and the first sale's first commands, and stop on Ctrl-C")
		users       = fs.Int("users", 20000, "distinct users")
		requests    = fs.Int("requests", 50000, "claims in all (beyond -users, repeats by the same users)")
		kind        = fs.String("kind", "units", "kind of sale: units, envelope (red envelopes) or codes")
		stock       = fs.Int64("stock", 1000, "units on sale (envelopes: how many; codes: how many); not with -serve")
		amount      = fs.Int64("amount", 0, "envelopes: the total amount split, in cents (default 100 per envelope)")
		perUser     = fs.Int64("per-user", 1, "units one user may hold")
		concurrency = fs.Int("concurrency", 64, "claims in flight at once")
		workers     = fs.Int("workers", 2, "worker processes")
		bin         = fs.String("bin", "", "run the gateway, worker and reaper binaries in this directory (make's bin/) instead of building them")
		port        = fs.Int("port", 8080, "with -serve: the gateway's port on 127.0.0.1 when it is free (0: any free port)")
		keep        = fs.Bool("keep", false, "keep the temporary directory (logs, data)")
		allocation  = fs.String("allocation", "first_come", "first_come, or draw: entries until -window, then winners drawn by the reaper and verified")
		window      = fs.Duration("window", 20*time.Second, "a draw's entry window, from its creation (the entries must be over by then)")
		waitingRoom = fs.Bool("waiting-room", false, "a sale behind a waiting room (-users people, -fast of them scripted to poll and claim as fast as they can), then the same crowd without one: the fast clients' share of the stock both ways")
		fast        = fs.Int("fast", 50, "with -waiting-room: scripted fast clients")
		admitRate   = fs.Int64("admit-per-second", 100, "with -waiting-room: the room's admissions per second")
		prequeue    = fs.Duration("prequeue", 5*time.Second, "with -waiting-room: the pre-queue")
		pass        = fs.Duration("pass", 10*time.Second, "with -waiting-room: a pass's life")
	)
	_ = fs.Parse(os.Args[1:])
	isSet := func(name string) bool {
		set := false
		fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
		return set
	}
	if *serve && *fg {
		defer foreground()()
	}
	// A terminal closed (SIGHUP) stops the stack as Ctrl-C does: its
	// servers are not left behind.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()

	dir, err := os.MkdirTemp("", "flashsale-demo-")
	if err != nil {
		return err
	}
	if !*keep {
		defer os.RemoveAll(dir)
	}
	gatewayPort := 0
	if *serve && *port != 0 {
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(*port)); err == nil {
			l.Close()
			gatewayPort = *port
		} else {
			say("127.0.0.1:%d is taken: the gateway takes a free port (make dev DEV_PORT=N picks one)", *port)
		}
	}
	sinks := sinkEnv()
	var common []string
	if src := os.Getenv("FLASHSALE_EVENTS_SOURCE"); src != "" { // the events API's source is the sinks'
		common = append(common, "FLASHSALE_EVENTS_SOURCE="+src)
	}
	if *serve { // a token that reads the events and nothing else, as a consumer should hold
		common = append(common, "FLASHSALE_EVENTS_READ_TOKEN="+eventsReadToken)
	}
	opts := harness.Options{Dir: dir, Workers: *workers, RedisAddr: os.Getenv("FLASHSALE_REDIS_ADDR"), MySQLDSN: os.Getenv("FLASHSALE_MYSQL_DSN"),
		Reaper: *serve || len(sinks) > 0, ReaperEnv: sinks, GatewayPort: gatewayPort, Env: common, Bin: *bin,
		Progress: func(step string, took time.Duration) { say("%s (%s)", step, took.Round(10*time.Millisecond)) }}
	say("starting redis-server, mariadbd, the gateway and %d workers (in %s): each step below as it ends", *workers, dir)
	s, err := harness.StartStack(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		if err := s.Close(); err != nil {
			say("stopping: %v", err)
		}
		if *serve {
			say("stopped")
		}
	}()
	if *serve {
		return serveDev(ctx, s, *workers, dir)
	}
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
	if len(sinks) > 0 {
		return sayDelivered(ctx, s)
	}
	return nil
}

// eventsReadToken is make dev's FLASHSALE_EVENTS_READ_TOKEN: random, one
// a run.
var eventsReadToken = func() string {
	var b [24]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on Linux
	return hex.EncodeToString(b[:])
}()

// sinkEnv is the FLASHSALE_EVENTS_* variables of the demo's environment
// when they set a sink (a webhook endpoint, Kafka): the reaper relays the
// sale's events to it.
func sinkEnv() []string {
	if os.Getenv("FLASHSALE_EVENTS_WEBHOOK_URLS") == "" && os.Getenv("FLASHSALE_EVENTS_KAFKA_BROKERS") == "" {
		return nil
	}
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "FLASHSALE_EVENTS_") {
			env = append(env, kv)
		}
	}
	return env
}

// sayDelivered waits until every sink has every event (up to a minute)
// and says how many each delivered.
func sayDelivered(ctx context.Context, s *harness.Stack) error {
	deadline := time.Now().Add(time.Minute)
	for {
		if err := s.EventSequence(ctx, time.Minute); err != nil {
			return err
		}
		last, err := s.DB.LastSequence(ctx)
		if err != nil {
			return err
		}
		states, err := s.DB.SinkStates(ctx)
		if err != nil {
			return err
		}
		done := len(states) > 0
		for _, st := range states {
			done = done && st.DeliveredUpto >= last
		}
		if done || time.Now().After(deadline) {
			say("events: %d published", last)
			for _, st := range states {
				say("  %s delivered %d, failed %d%s", st.Name, st.DeliveredUpto-st.Failed, st.Failed, map[bool]string{true: "", false: " (still behind after a minute: bin/reaper events)"}[st.DeliveredUpto >= last])
			}
			return nil
		}
		if err := backoff.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
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

// serveDev keeps stack s up until ctx ends, without a voucher (README's
// first sale makes one), and prints how to reach it.
func serveDev(ctx context.Context, s *harness.Stack, workers int, dir string) error {
	user := s.Token("alice")
	fmt.Printf(`
flashsale is up (the gateway, %d workers, the reaper); Ctrl-C stops everything and removes %s
  gateway      %s
  console      %s/admin/console#token=%s
  logs         %s
%s
Paste into another shell to use this stack (README.md's commands, bin/ and curl):
  export GATEWAY=%s
  export ADMIN=%s
  export TOKEN=%s
  export EVENTS=%s
  export FLASHSALE_ADMIN_TOKEN=%s
  export FLASHSALE_JWT_SECRET=%s
  export FLASHSALE_REDIS_ADDR=%s
  export FLASHSALE_MYSQL_DSN='%s'

then, as README.md's "A first sale" goes on:
  V=$(curl -s -X POST -H "Authorization: Bearer $ADMIN" -H 'Content-Type: application/json' \
    -d '{"name":"phone","stock":3,"per_user_limit":1}' $GATEWAY/admin/v1/vouchers | jq -r .id)   # a voucher
  curl -X POST -H "Authorization: Bearer $TOKEN" $GATEWAY/v1/vouchers/$V/orders     # alice claims
  bin/gateway token --user bob                                                      # another user's token
  curl -H "Authorization: Bearer $EVENTS" "$GATEWAY/admin/v1/events?after=0"        # the order events, with the token that reads only them (docs/EVENTS.md)
  bin/reaper events tail --after 0                                                  # each event as it is published (Ctrl-C stops it)
  bin/reaper pause $V; bin/reaper resume $V                                         # the sale's operator commands (RUNBOOK.md)
  bin/reaper report $V                                                              # the sale's report
`, workers, dir, s.URL, s.URL, s.AdminToken, s.LogDir(), opsLines(s),
		s.URL, s.AdminToken, user, eventsReadToken, s.AdminToken, s.JWTSecret, s.Var("FLASHSALE_REDIS_ADDR"), s.Var("FLASHSALE_MYSQL_DSN"))
	if _, err := exec.LookPath("jq"); err != nil {
		say("jq is not installed; the first sale reads ids with it: apt-get install -y jq")
	}
	<-ctx.Done()
	say("stopping")
	return nil
}

// opsLines are the roles' ops addresses (GET /metrics, /healthz,
// /readyz), one a line.
func opsLines(s *harness.Stack) string {
	var b strings.Builder
	line := func(name string, p *harness.Proc) {
		if p != nil && p.OpsURL != "" {
			fmt.Fprintf(&b, "  %-12s %s/metrics  (and /healthz, /readyz)\n", name+" ops", p.OpsURL)
		}
	}
	line("gateway", s.Gateway)
	for i, w := range s.Workers {
		line("worker-"+strconv.Itoa(i), w)
	}
	line("reaper", s.Reaper)
	return b.String()
}

func say(format string, args ...any) {
	fmt.Printf("%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}
