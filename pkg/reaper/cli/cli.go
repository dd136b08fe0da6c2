// Package cli is the reaper's command line: the role (no argument),
// "migrate", and the operator's commands (a sale's create, pause, resume,
// top-up, split, extend and tail; report, reconcile, deadletters, draw,
// events). cmd/reaper hands off to Main, as each role's binary hands off
// to its cli package (River's main hands off to its CLI package so).
// Configuration: FLASHSALE_* variables (docs/CONFIGURATION.md).
package cli

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/flashsale/flashsale/pkg/app"
	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/draw"
	"github.com/flashsale/flashsale/pkg/event"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/upkeep"
	"github.com/flashsale/flashsale/pkg/reaper"
	"github.com/flashsale/flashsale/pkg/room"
)

type config struct {
	app.Common
	reaper.Config
}

func (c *config) Base() app.Common { return c.Common }

// SetDefaults fills the role's defaults (see app.Main).
func (c *config) SetDefaults() { c.Config.SetDefaults() }

// Validate refuses wrong values before anything is dialled (see app.Main).
func (c *config) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	return c.Config.Validate()
}

// Main runs the reaper binary: the role, or the command its first
// argument names.
func Main() {
	app.Main(&config{}, run, append([]app.Command[*config]{reportCommand(), drawCommand(), deadLettersCommand(), reconcileCommand(), eventsCommand()}, saleCommands()...)...)
}

// voucherID reads a VOUCHER_ID argument.
func voucherID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("VOUCHER_ID must be a positive whole number, got %q", s)
	}
	return id, nil
}

// withMySQL runs f with MySQL, within timeout, and closes the connections
// after: a command leaves none open (mariadbd logged an "Aborted
// connection" for each one a command left).
func withMySQL(ctx context.Context, cfg *config, timeout time.Duration, f func(ctx context.Context, mysql *db.Store) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	mysql, err := cfg.MySQL(ctx)
	if err != nil {
		return err
	}
	defer mysql.Close() //nolint:errcheck
	return f(ctx, mysql)
}

// withVoucher runs f with MySQL and the voucher whose id is arg, as
// withMySQL; an id MySQL does not have is noVoucher.
func withVoucher(ctx context.Context, cfg *config, arg string, timeout time.Duration, f func(ctx context.Context, mysql *db.Store, v db.Voucher) error) error {
	id, err := voucherID(arg)
	if err != nil {
		return err
	}
	return withMySQL(ctx, cfg, timeout, func(ctx context.Context, mysql *db.Store) error {
		v, err := mysql.Voucher(ctx, id)
		if errors.Is(err, db.ErrNotFound) {
			return noVoucher(id)
		}
		if err != nil {
			return err
		}
		return f(ctx, mysql, v)
	})
}

// noVoucher is the one answer every command gives for a voucher MySQL
// does not have.
func noVoucher(id int64) error { return fmt.Errorf("no voucher %d", id) }

func reportCommand() app.Command[*config] {
	var asJSON bool
	return app.Command[*config]{Name: "report", Task: "Reports", Args: "VOUCHER_ID", NArgs: 1,
		Summary: "the account of one sale from MySQL: opened, sold out, buyers, payments, releases, lag",
		Flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, "write JSON (the fields of GET /admin/v1/vouchers/{id}/report but refused_claims and outcome_unknown_claims)")
		},
		Run: func(ctx context.Context, cfg *config, _ *app.Runtime, args []string) error {
			return report(ctx, cfg, args[0], asJSON)
		}}
}

// report is "reaper report VOUCHER_ID [--json]": the sale's account from
// MySQL alone (refused claims are known only to each gateway replica).
func report(ctx context.Context, cfg *config, arg string, asJSON bool) error {
	return withVoucher(ctx, cfg, arg, 5*time.Minute, func(cctx context.Context, mysql *db.Store, v db.Voucher) error {
		return writeReport(cctx, cfg, mysql, v, asJSON)
	})
}

// writeReport writes voucher v's report.
func writeReport(cctx context.Context, cfg *config, mysql *db.Store, v db.Voucher, asJSON bool) error {
	id := v.ID
	rep, err := mysql.Report(cctx, id)
	if err != nil {
		return err
	}
	// A waiting room's story is kept in Redis, beside the room.
	var queue *room.Story
	if v.WaitingRoom != "" {
		redis, err := cfg.Redis(cctx, 2)
		if err != nil {
			return err
		}
		defer redis.Client().Close()
		if queue, err = room.NewStore(redis, 0).Story(cctx, id, time.Now()); err != nil {
			return err
		}
	}
	if asJSON {
		return writeJSON(struct {
			VoucherID string `json:"voucher_id"`
			Name      string `json:"name"`
			Kind      string `json:"kind"`
			db.Report
			Queue *room.Story `json:"queue,omitempty"`
		}{strconv.FormatInt(id, 10), v.Name, v.Kind, rep, queue})
	}
	return reaper.PrintReport(os.Stdout, v, rep, queue)
}

// consumerName defaults the reaper's name in the group to
// reaper-<host>-<pid>-<4 random hex digits>: unique per process, so two
// reapers started alike on one host (or in two containers sharing a
// host name) are two consumers, each with its own pending entries.
func consumerName(cfg *config) error {
	if cfg.Consumer != "" {
		return nil
	}
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	var b [2]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on Linux
	cfg.Consumer = fmt.Sprintf("reaper-%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	return nil
}

// newReaper is the reaper of cfg over the stores, logging, counting and
// auditing as rt says.
func newReaper(cfg *config, redis *rdb.Store, mysql *db.Store, rt *app.Runtime) (*reaper.Reaper, error) {
	return reaper.New(cfg.Config, redis, mysql, rt.Log, reaper.WithRegistry(rt.Registry), reaper.WithAudit(rt.Audit))
}

func run(ctx context.Context, cfg *config, rt *app.Runtime) error {
	if err := consumerName(cfg); err != nil {
		return err
	}
	return rt.Serve(ctx, cfg.Common, func(ctx context.Context, ready *app.Readiness) error {
		redis, mysql, closeAll, err := cfg.Connect(ctx, rt.Log, 8)
		if err != nil {
			return err
		}
		defer closeAll()
		if err := redis.SetDurability(cfg.Durability()); err != nil {
			return err
		}
		r, err := newReaper(cfg, redis, mysql, rt)
		if err != nil {
			return err
		}
		ready.Set(app.Ready(redis, mysql))
		return r.Run(ctx)
	})
}

func reconcileCommand() app.Command[*config] {
	var repair, asJSON bool
	return app.Command[*config]{Name: "reconcile", Task: "Stores", NArgs: 0, ExitNo: "the stores differ",
		Summary: "compare Redis with MySQL and the streams, voucher by voucher; exit 0 when they agree, 1 when they differ, 2 when it failed",
		Flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&repair, "repair", false, "rewrite Redis from MySQL and the streams where they differ (stop the gateways first)")
			fs.BoolVar(&asJSON, "json", false, "write JSON")
		},
		Run: func(ctx context.Context, cfg *config, rt *app.Runtime, _ []string) error {
			return reconcile(ctx, cfg, rt, repair, asJSON)
		}}
}

func reconcile(ctx context.Context, cfg *config, rt *app.Runtime, repair, asJSON bool) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	redis, mysql, closeAll, err := rt.Connect(cctx, cfg.Common, 4)
	if err != nil {
		return err
	}
	defer closeAll()
	checks, err := reaper.Reconcile(ctx, redis, mysql, time.Now(), repair)
	if err != nil {
		return err
	}
	if asJSON {
		if err := writeJSON(map[string]any{"vouchers": nonNil(checks)}); err != nil {
			return err
		}
	} else {
		reaper.PrintChecks(os.Stdout, checks, 20)
	}
	differ := 0
	for _, c := range checks {
		if len(c.Differences) > 0 && !c.Repaired {
			differ++
		}
	}
	rt.Log.Info("reconcile done", zap.Int("vouchers", len(checks)), zap.Int("differing", differ), zap.Bool("repair", repair))
	if differ > 0 {
		return &app.ExitError{Code: app.ExitNo, Err: fmt.Errorf("%d vouchers differ (run with --repair to rebuild Redis)", differ)}
	}
	return nil
}

// nonNil is s, or an empty slice: JSON lists are [] when empty, never null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// deadLettersCommand is "reaper deadletters [list|requeue|purge]".
// Without a subcommand it prints each partition's count and oldest. Dead
// letters are never trimmed on their own (docs/RUNBOOK.md).
func deadLettersCommand() app.Command[*config] {
	var asJSON, all, yes bool
	var olderThan, trim app.Duration
	jsonFlag := func(fs *flag.FlagSet) { fs.BoolVar(&asJSON, "json", false, "write JSON") }
	withRedis := func(run func(ctx context.Context, redis *rdb.Store) error) func(context.Context, *config, *app.Runtime, []string) error {
		return func(ctx context.Context, cfg *config, rt *app.Runtime, _ []string) error {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			defer cancel()
			redis, err := rt.Redis(cctx, cfg.Common, 2)
			if err != nil {
				return err
			}
			defer redis.Client().Close()
			return run(cctx, redis)
		}
	}
	purge := func(ctx context.Context, redis *rdb.Store) error {
		if !all && olderThan == 0 {
			return errors.New("purge needs --older-than D or --all")
		}
		return purgeDeadLetters(ctx, redis, time.Duration(olderThan), all, yes, asJSON)
	}
	return app.Command[*config]{Name: "deadletters", Task: "Dead letters", NArgs: 0,
		Summary: "each partition's count of dead letters and the oldest",
		Flags: func(fs *flag.FlagSet) {
			jsonFlag(fs)
			fs.Var(&trim, "trim-older-than", "purge those dead-lettered longer ago than `DURATION` (purge --older-than --yes)")
		},
		Run: withRedis(func(ctx context.Context, redis *rdb.Store) error {
			if trim > 0 {
				olderThan, yes = trim, true
				return purge(ctx, redis)
			}
			return deadLetterSummary(ctx, redis, asJSON)
		}),
		Sub: []app.Command[*config]{
			{Name: "list", NArgs: 0, Summary: "every dead letter, with its reason", Flags: jsonFlag,
				Run: withRedis(func(ctx context.Context, redis *rdb.Store) error { return listDeadLetters(ctx, redis, asJSON) })},
			{Name: "requeue", Args: "[ID...]", NArgs: -1, ExitNo: "",
				Summary: "process dead letters again, once the cause is fixed: those named, or --all",
				Flags: func(fs *flag.FlagSet) {
					jsonFlag(fs)
					fs.BoolVar(&all, "all", false, "requeue every dead letter")
				},
				Run: func(ctx context.Context, cfg *config, rt *app.Runtime, ids []string) error {
					if !all && len(ids) == 0 {
						return errors.New("requeue needs --all or dead letter ids")
					}
					return requeue(ctx, cfg, rt, ids, asJSON)
				}},
			{Name: "purge", NArgs: 0, Summary: "delete dead letters, after reading them: those older than --older-than, or --all",
				Flags: func(fs *flag.FlagSet) {
					jsonFlag(fs)
					fs.BoolVar(&all, "all", false, "purge every dead letter")
					fs.Var(&olderThan, "older-than", "purge those dead-lettered longer ago than `DURATION` (30d, 36h)")
					fs.BoolVar(&yes, "yes", false, "do not ask: delete (without a terminal, purge deletes only with --yes)")
				},
				Run: withRedis(purge)},
		}}
}

// listDeadLetters prints every dead letter of every partition.
func listDeadLetters(ctx context.Context, redis *rdb.Store, asJSON bool) error {
	var dead []rdb.DeadEntry
	for p := range redis.Partitions() {
		d, err := upkeep.New(redis).DeadLetters(ctx, p)
		if err != nil {
			return err
		}
		dead = append(dead, d...)
	}
	if asJSON {
		return writeJSON(map[string]any{"dead_letters": nonNil(dead)})
	}
	if len(dead) == 0 {
		fmt.Println("no dead letters")
		return nil
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "partition\tdead id\tdead-lettered at\torder\tvoucher\tuser\treason\t")
	for _, d := range dead {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", d.Partition, d.DeadID, d.DeadAt.Format(time.RFC3339), d.OrderID, d.VoucherID, d.UserID, d.Reason)
	}
	return tw.Flush()
}

// requeue processes the dead letters ids (all of them when none is named)
// again; an id no partition holds is an error, after the others ran.
func requeue(ctx context.Context, cfg *config, rt *app.Runtime, ids []string, asJSON bool) error {
	if err := consumerName(cfg); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	redis, mysql, closeAll, err := rt.Connect(cctx, cfg.Common, 2)
	if err != nil {
		return err
	}
	defer closeAll()
	r, err := newReaper(cfg, redis, mysql, rt)
	if err != nil {
		return err
	}
	var out []reaper.Requeued
	for p := range redis.Partitions() {
		res, err := r.RequeueDeadLetters(cctx, p, ids...)
		out = append(out, res...)
		if err != nil {
			return err
		}
	}
	if asJSON {
		if err := writeJSON(map[string]any{"requeued": nonNil(out)}); err != nil {
			return err
		}
	} else if len(out) == 0 && len(ids) == 0 {
		fmt.Println("no dead letters to requeue")
	} else if len(out) > 0 { // no table with nothing in it before the error below
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "dead id\tresult\tstatus\twhy\t")
		for _, q := range out {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", q.DeadID, q.Result, q.Status, q.Why)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	var missing []string
	for _, id := range ids {
		if !slices.ContainsFunc(out, func(q reaper.Requeued) bool { return q.DeadID == id }) {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no dead letter %s (reaper deadletters list shows them)", strings.Join(missing, ", "))
	}
	return nil
}

// purgeDeadLetters deletes the dead letters older than olderThan (all of
// them with all), after asking on a terminal unless yes, and says what it
// deleted.
func purgeDeadLetters(ctx context.Context, redis *rdb.Store, olderThan time.Duration, all, yes, asJSON bool) error {
	before := time.Now().Add(-olderThan)
	what := "dead letters older than " + olderThan.String()
	if all {
		before, what = time.Now().Add(time.Hour), "every dead letter"
	}
	if !yes {
		if !isTerminal(os.Stdin) {
			return fmt.Errorf("purge deletes %s: run it again with --yes to delete them", what)
		}
		fmt.Fprintf(os.Stderr, "delete %s? [y/N] ", what)
		answer, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		if a := strings.TrimSpace(strings.ToLower(answer)); a != "y" && a != "yes" {
			return errors.New("nothing deleted")
		}
	}
	type purged struct {
		Partition int   `json:"partition"`
		Purged    int64 `json:"purged"`
	}
	var out []purged
	var total int64
	for p := range redis.Partitions() {
		n, err := upkeep.New(redis).TrimDeadLetters(ctx, p, before)
		if err != nil {
			return err
		}
		out, total = append(out, purged{p, n}), total+n
	}
	if asJSON {
		return writeJSON(map[string]any{"purged": nonNil(out), "total": total})
	}
	fmt.Printf("purged %d dead letters (%s)\n", total, what)
	return nil
}

// isTerminal reports whether f is a terminal (a person can answer):
// /dev/null is a character device too, so the test is the terminal's own
// ioctl.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// deadLetterSummary prints each partition's dead letter count and oldest.
func deadLetterSummary(ctx context.Context, redis *rdb.Store, asJSON bool) error {
	var stats []upkeep.DeadLetterStats
	for p := range redis.Partitions() {
		st, err := upkeep.New(redis).DeadLetterStats(ctx, p)
		if err != nil {
			return err
		}
		stats = append(stats, st)
	}
	if asJSON {
		return writeJSON(map[string]any{"partitions": stats})
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "partition\tdead letters\toldest\t")
	for _, st := range stats {
		oldest := "-"
		if !st.Oldest.IsZero() {
			oldest = st.Oldest.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t\n", st.Partition, st.Count, oldest)
	}
	return tw.Flush()
}

// eventsCommand is "reaper events [--json]": where the order events and
// each sink stand; "reaper events redeliver": send a sink's events again
// (docs/EVENTS.md).
func eventsCommand() app.Command[*config] {
	var asJSON, failed bool
	var sink string
	var after int64 = -1
	return app.Command[*config]{Name: "events", Task: "Reports", NArgs: 0,
		Summary: "where the order events stand: the last sequence published, the sequences kept for the events API, those not published yet, and each sink",
		Flags:   func(fs *flag.FlagSet) { fs.BoolVar(&asJSON, "json", false, "write JSON") },
		Run: func(ctx context.Context, cfg *config, _ *app.Runtime, _ []string) error {
			return eventsState(ctx, cfg, asJSON)
		},
		Sub: []app.Command[*config]{tailCommand(), {Name: "redeliver", NArgs: 0, ExitNo: "",
			Summary: "send a sink's events again: those after --after SEQUENCE (a backfill; a sink stopped by 410 Gone starts again), or those recorded --failed",
			Flags: func(fs *flag.FlagSet) {
				fs.StringVar(&sink, "sink", "", "the sink, as reaper events names it (kafka, webhook:URL)")
				fs.Int64Var(&after, "after", -1, "send the events after `SEQUENCE` (0: every event kept)")
				fs.BoolVar(&failed, "failed", false, "send the events recorded failed for the sink")
			},
			Run: func(ctx context.Context, cfg *config, _ *app.Runtime, _ []string) error {
				switch {
				case sink == "":
					return errors.New("redeliver needs --sink NAME (reaper events lists them)")
				case (after >= 0) == failed:
					return errors.New("redeliver needs one of --after SEQUENCE and --failed")
				}
				return withMySQL(ctx, cfg, time.Minute, func(cctx context.Context, mysql *db.Store) error {
					return redeliver(cctx, mysql, sink, after, failed)
				})
			}}},
	}
}

// redeliver is "reaper events redeliver": sink's events after after, or
// those recorded failed, sent again.
func redeliver(cctx context.Context, mysql *db.Store, sink string, after int64, failed bool) error {
	if failed {
		n, err := mysql.RedeliverFailed(cctx, sink)
		if err != nil {
			return err
		}
		fmt.Printf("%s: %d failed events to send again\n", sink, n)
		return nil
	}
	first, last, err := mysql.RedeliverSink(cctx, sink, after)
	if err != nil {
		return err
	}
	fmt.Println(redelivering(sink, after, first, last))
	return nil
}

// redelivering says what a redelivery to sink after after sends: the
// kept events first to last (first 0: none kept after after), and the
// ones it missed, deleted past the retention, never as if caught up. It
// does not say "again": a sink stopped by 410, or added later, was never
// sent some of them, and its place does not say which.
func redelivering(sink string, after, first, last int64) string {
	switch {
	case first == 0 && after < last:
		return fmt.Sprintf("%s: the events %d to %d were deleted past FLASHSALE_EVENTS_RETENTION and none is kept: it missed them, and gets the events to come, from %d",
			sink, after+1, last, last+1)
	case first == 0:
		return fmt.Sprintf("%s: nothing published after %d yet: it gets the events to come", sink, after)
	case first > after+1:
		return fmt.Sprintf("%s: sending the events %d to %d; those after %d and before %d were deleted past FLASHSALE_EVENTS_RETENTION",
			sink, first, last, after, first)
	default:
		return fmt.Sprintf("%s: sending the events %d to %d", sink, first, last)
	}
}

// eventsState prints where the outbox and each sink stand.
func eventsState(ctx context.Context, cfg *config, asJSON bool) error {
	return withMySQL(ctx, cfg, time.Minute, func(cctx context.Context, mysql *db.Store) error {
		return writeEventsState(cctx, mysql, asJSON)
	})
}

// writeEventsState writes where the outbox and each sink stand.
func writeEventsState(cctx context.Context, mysql *db.Store, asJSON bool) error {
	st, err := mysql.EventsState(cctx)
	if err != nil {
		return err
	}
	states, err := mysql.SinkStates(cctx)
	if err != nil {
		return err
	}
	sinks := make([]event.SinkStatus, len(states))
	for i, s := range states {
		sinks[i] = event.StatusOf(s, st.Last, time.Now())
	}
	var oldest *time.Time
	if !st.OldestUnsequenced.IsZero() {
		oldest = &st.OldestUnsequenced
	}
	if asJSON {
		return writeJSON(struct {
			Published         int64              `json:"published_up_to"`
			First             int64              `json:"first_kept"`
			Kept              int64              `json:"kept"`
			Unpublished       int64              `json:"unpublished"`
			OldestUnpublished *time.Time         `json:"oldest_unpublished,omitempty"`
			Sinks             []event.SinkStatus `json:"sinks"`
		}{st.Last, st.First, st.Kept, st.Unsequenced, oldest, sinks})
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "published up to\t%d\n", st.Last)
	if st.Kept > 0 {
		fmt.Fprintf(tw, "kept\t%d events, %d to %d (GET /admin/v1/events)\n", st.Kept, st.First, st.First+st.Kept-1)
	} else {
		fmt.Fprintf(tw, "kept\tnone\n")
	}
	if oldest != nil {
		fmt.Fprintf(tw, "not published yet\t%d, the oldest written %s ago\n", st.Unsequenced, time.Since(*oldest).Round(time.Second))
	} else {
		fmt.Fprintf(tw, "not published yet\tnone\n")
	}
	if len(sinks) == 0 {
		fmt.Fprintf(tw, "sinks\tnone relayed (FLASHSALE_EVENTS_WEBHOOK_URLS, FLASHSALE_EVENTS_KAFKA_BROKERS)\n")
	}
	for _, s := range sinks {
		line := fmt.Sprintf("delivered up to %d", s.DeliveredUpTo)
		if s.Undelivered > 0 {
			line += fmt.Sprintf(", %d undelivered", s.Undelivered)
			if s.OldestUndelivered != nil {
				line += fmt.Sprintf(" (the oldest written %s ago)", time.Since(*s.OldestUndelivered).Round(time.Second))
			}
		}
		line += fmt.Sprintf(", %d failed", s.Failed)
		if s.Retrying != "" {
			line += fmt.Sprintf("; retrying (%d attempts): %s", s.Attempts, s.Retrying)
		}
		if s.Stopped != "" {
			line += "; STOPPED: " + s.Stopped + " (reaper events redeliver --sink NAME --after SEQUENCE starts it again)"
		}
		fmt.Fprintf(tw, "sink %s\t%s\n", s.Name, line)
	}
	return tw.Flush()
}

func writeJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func drawCommand() app.Command[*config] {
	var asJSON, entries bool
	return app.Command[*config]{Name: "draw", Task: "Draws",
		Summary: "a draw sale's verification",
		Sub: []app.Command[*config]{{Name: "verify", Args: "VOUCHER_ID", NArgs: 1, ExitNo: "the draw does not verify",
			Summary: "recompute a draw sale's winners from its revealed seed and its entries; exit 0 only when they are the recorded winners",
			Flags: func(fs *flag.FlagSet) {
				fs.BoolVar(&asJSON, "json", false, "write JSON")
				fs.BoolVar(&entries, "entries", false, "print the entry ids (no user ids), one per line, before the check (with --json: not printed)")
			},
			Run: func(ctx context.Context, cfg *config, _ *app.Runtime, args []string) error {
				return verifyDraw(ctx, cfg, args[0], asJSON, entries)
			}}}}
}

// verifyDraw is "reaper draw verify VOUCHER_ID [--json] [--entries]": the
// draw recomputed from the revealed seed and the entries in MySQL; exit 0
// only when they give the recorded winners.
func verifyDraw(ctx context.Context, cfg *config, arg string, asJSON, entries bool) error {
	return withVoucher(ctx, cfg, arg, 10*time.Minute, func(cctx context.Context, mysql *db.Store, v db.Voucher) error {
		return writeDrawCheck(cctx, mysql, v, asJSON, entries)
	})
}

// writeDrawCheck writes draw voucher v's check; an error when the draw is
// not the one recorded.
func writeDrawCheck(cctx context.Context, mysql *db.Store, v db.Voucher, asJSON, entries bool) error {
	id := v.ID
	switch {
	case !v.IsDraw():
		return fmt.Errorf("voucher %d is not a draw sale (allocation %s)", id, v.Allocation)
	case v.DrawState != draw.StateDrawn && v.EndsAt != nil:
		return fmt.Errorf("voucher %d is not drawn yet: its entries close at %s, and the reaper draws it within a minute after", id, v.EndsAt.UTC().Format(time.RFC3339))
	}
	out := bufio.NewWriterSize(os.Stdout, 1<<16)
	defer out.Flush()
	var each func(int64)
	var list []byte
	if entries {
		each = func(e int64) {
			list = strconv.AppendInt(list[:0], e, 10)
			list = append(list, '\n')
			if !asJSON {
				_, _ = out.Write(list)
			}
		}
	}
	check, err := reaper.VerifyDraw(cctx, mysql, id, each)
	if err != nil {
		return err
	}
	if asJSON {
		if err := out.Flush(); err != nil {
			return err
		}
		if err := writeJSON(check); err != nil {
			return err
		}
	} else {
		reaper.PrintDrawCheck(out, check)
	}
	if !check.OK {
		return &app.ExitError{Code: app.ExitNo, Err: fmt.Errorf("voucher %d: the draw does not verify", id)}
	}
	return nil
}
