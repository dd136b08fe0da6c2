// Package cli is the reaper's command line: the role (no argument),
// "migrate", and the operator's commands (reconcile, deadletters,
// report). cmd/reaper hands off to Main, as River's main hands off to its
// CLI package. Configuration: FLASHSALE_* variables (README).
package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/app"
	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/reaper"
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
	app.Main(&config{}, run,
		app.Command[*config]{Name: "reconcile", Run: reconcile,
			Summary: "compare Redis with MySQL and the streams, voucher by voucher; exit 0 when they agree, 1 when they differ, 2 when it failed",
			Usage: `[--repair] [--json]
  --repair  rewrite Redis from MySQL and the streams where they differ (stop the gateways first)
  --json    write JSON`},
		app.Command[*config]{Name: "deadletters", Run: deadLetters,
			Summary: "the dead letters: counts (no subcommand), list, requeue once the cause is fixed, purge after reading them",
			Usage: `[list|requeue|purge] [flags]
  (none) [--json] [--trim-older-than D]   each partition's count and oldest
  list [--json]                           every dead letter, with its reason
  requeue [--json] (--all | ID...)        process them again
  purge (--older-than D | --all)          delete them`},
		app.Command[*config]{Name: "report", Run: report,
			Summary: "the account of one sale from MySQL: opened, sold out, buyers, payments, releases, lag",
			Usage: `VOUCHER_ID [--json]
  --json    write JSON (the fields of GET /admin/v1/vouchers/{id}/report but refused_claims)`},
		app.Command[*config]{Name: "draw", Run: drawCommand,
			Summary: "recompute a draw sale's winners from its revealed seed and its entries; exit 0 only when they are the recorded winners",
			Usage: `verify VOUCHER_ID [--json] [--entries]
  --json     write JSON
  --entries  print the entry ids (no user ids), one per line, before the check (with --json: not printed)`})
}

// report is "reaper report VOUCHER_ID [--json]": the sale's account from
// MySQL alone (refused claims are known only to each gateway replica).
func report(ctx context.Context, cfg *config, _ *app.Runtime, args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "write JSON")
	var ids []string
	for len(args) > 0 { // flags before or after the id
		if err := fs.Parse(args); err != nil {
			return err
		}
		if args = fs.Args(); len(args) > 0 {
			ids, args = append(ids, args[0]), args[1:]
		}
	}
	if len(ids) != 1 {
		return errors.New("report needs one VOUCHER_ID")
	}
	id, err := strconv.ParseInt(ids[0], 10, 64)
	if err != nil || id <= 0 {
		return fmt.Errorf("VOUCHER_ID must be a positive whole number, got %q", ids[0])
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	mysql, err := cfg.MySQL(cctx)
	if err != nil {
		return err
	}
	v, err := mysql.Voucher(cctx, id)
	if errors.Is(err, db.ErrNotFound) {
		return fmt.Errorf("no voucher %d", id)
	}
	if err != nil {
		return err
	}
	rep, err := mysql.Report(cctx, id)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(struct {
			VoucherID string `json:"voucher_id"`
			Name      string `json:"name"`
			Kind      string `json:"kind"`
			db.Report
		}{strconv.FormatInt(id, 10), v.Name, v.Kind, rep})
	}
	return reaper.PrintReport(os.Stdout, v, rep)
}

// consumerName defaults the reaper's name in the group to reaper-<host>.
func consumerName(cfg *config) error {
	if cfg.Consumer != "" {
		return nil
	}
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	cfg.Consumer = "reaper-" + host
	return nil
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
		r, err := reaper.New(cfg.Config, redis, mysql, rt.Log, reaper.WithRegistry(rt.Registry), reaper.WithAudit(rt.Audit))
		if err != nil {
			return err
		}
		ready.Set(app.Ready(redis, mysql))
		return r.Run(ctx)
	})
}

func reconcile(ctx context.Context, cfg *config, rt *app.Runtime, args []string) error {
	fs := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	repair := fs.Bool("repair", false, "rewrite Redis from MySQL and the streams where they differ (stop the gateways first)")
	asJSON := fs.Bool("json", false, "write JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	redis, mysql, closeAll, err := cfg.Connect(cctx, rt.Log, 4)
	if err != nil {
		return err
	}
	defer closeAll()
	checks, err := reaper.Reconcile(ctx, redis, mysql, time.Now(), *repair)
	if err != nil {
		return err
	}
	if *asJSON {
		if err := writeJSON(map[string]any{"vouchers": checks}); err != nil {
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
	rt.Log.Info("reconcile done", zap.Int("vouchers", len(checks)), zap.Int("differing", differ), zap.Bool("repair", *repair))
	if differ > 0 {
		return &app.ExitError{Code: app.ExitNo, Err: fmt.Errorf("%d vouchers differ (run with --repair to rebuild Redis)", differ)}
	}
	return nil
}

// deadLetters is "reaper deadletters [list|requeue|purge] [flags]":
//
//	list [--json]                     every dead letter, with its reason
//	requeue [--json] (--all | ID...)  process them again, once the cause is fixed
//	purge (--older-than D | --all)    delete them, after reading them
//
// Without a subcommand it prints each partition's count and oldest, and
// --trim-older-than D is purge --older-than D. Dead letters are never
// trimmed on their own (docs/RUNBOOK.md).
func deadLetters(ctx context.Context, cfg *config, rt *app.Runtime, args []string) error {
	sub := "summary"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	switch sub { // a mistyped subcommand is said before anything is dialled
	case "summary", "list", "requeue", "purge":
	default:
		return fmt.Errorf("unknown deadletters command %q (list, requeue, purge)", sub)
	}
	fs := flag.NewFlagSet("deadletters "+sub, flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "write JSON")
	all := fs.Bool("all", false, "requeue or purge every dead letter")
	olderThan := fs.Duration("older-than", 0, "purge those dead-lettered longer ago than this (e.g. 720h)")
	trim := fs.Duration("trim-older-than", 0, "the same as purge --older-than")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *trim != 0 {
		sub, *olderThan = "purge", *trim
	}
	if *olderThan < 0 {
		return fmt.Errorf("--older-than must not be negative, got %s", *olderThan)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	redis, err := cfg.Redis(cctx, 2)
	if err != nil {
		return err
	}
	defer redis.Client().Close()
	switch sub {
	case "summary":
		return deadLetterSummary(cctx, redis, *asJSON)
	case "list":
		var dead []rdb.DeadEntry
		for p := range redis.Partitions() {
			d, err := redis.DeadLetters(cctx, p)
			if err != nil {
				return err
			}
			dead = append(dead, d...)
		}
		if *asJSON {
			return writeJSON(map[string]any{"dead_letters": dead})
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "partition\tdead id\tdead-lettered at\torder\tvoucher\tuser\treason\t")
		for _, d := range dead {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", d.Partition, d.DeadID, d.DeadAt.Format(time.RFC3339), d.OrderID, d.VoucherID, d.UserID, d.Reason)
		}
		return tw.Flush()
	case "requeue":
		if !*all && fs.NArg() == 0 {
			return errors.New("requeue needs --all or dead letter ids")
		}
		if err := consumerName(cfg); err != nil {
			return err
		}
		mysql, err := cfg.MySQL(cctx)
		if err != nil {
			return err
		}
		r, err := reaper.New(cfg.Config, redis, mysql, rt.Log, reaper.WithRegistry(rt.Registry), reaper.WithAudit(rt.Audit))
		if err != nil {
			return err
		}
		var out []reaper.Requeued
		for p := range redis.Partitions() {
			res, err := r.RequeueDeadLetters(cctx, p, fs.Args()...)
			out = append(out, res...)
			if err != nil {
				return err
			}
		}
		if *asJSON {
			return writeJSON(map[string]any{"requeued": out})
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "dead id\tresult\tstatus\twhy\t")
		for _, q := range out {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", q.DeadID, q.Result, q.Status, q.Why)
		}
		return tw.Flush()
	case "purge":
		if !*all && *olderThan == 0 {
			return errors.New("purge needs --older-than D or --all")
		}
		before := time.Now().Add(-*olderThan)
		if *all {
			before = time.Now().Add(time.Hour)
		}
		var trimmed int64
		for p := range redis.Partitions() {
			n, err := redis.TrimDeadLetters(cctx, p, before)
			if err != nil {
				return err
			}
			trimmed += n
		}
		rt.Log.Info("dead letters purged", zap.Int64("purged", trimmed), zap.Duration("older_than", *olderThan), zap.Bool("all", *all))
		return deadLetterSummary(cctx, redis, *asJSON)
	default:
		return fmt.Errorf("unknown deadletters command %q (list, requeue, purge)", sub)
	}
}

// deadLetterSummary prints each partition's dead letter count and oldest.
func deadLetterSummary(ctx context.Context, redis *rdb.Store, asJSON bool) error {
	var stats []rdb.DeadLetterStats
	for p := range redis.Partitions() {
		st, err := redis.DeadLetterStats(ctx, p)
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

func writeJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// drawCommand is "reaper draw verify VOUCHER_ID [--json] [--entries]":
// the draw recomputed from the revealed seed and the entries in MySQL;
// exit 0 only when they give the recorded winners.
func drawCommand(ctx context.Context, cfg *config, _ *app.Runtime, args []string) error {
	if len(args) == 0 || args[0] != "verify" {
		return &app.ExitError{Code: app.ExitFailed, Err: errors.New("usage: draw verify VOUCHER_ID [--json] [--entries]")}
	}
	fs := flag.NewFlagSet("draw verify", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "write JSON")
	entries := fs.Bool("entries", false, "print every entry id (no user ids), one per line, before the check")
	var ids []string
	for args = args[1:]; len(args) > 0; {
		if err := fs.Parse(args); err != nil {
			return err
		}
		if args = fs.Args(); len(args) > 0 {
			ids, args = append(ids, args[0]), args[1:]
		}
	}
	if len(ids) != 1 {
		return errors.New("draw verify needs one VOUCHER_ID")
	}
	id, err := strconv.ParseInt(ids[0], 10, 64)
	if err != nil || id <= 0 {
		return fmt.Errorf("VOUCHER_ID must be a positive whole number, got %q", ids[0])
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	mysql, err := cfg.MySQL(cctx)
	if err != nil {
		return err
	}
	out := bufio.NewWriterSize(os.Stdout, 1<<16)
	defer out.Flush()
	var each func(int64)
	var list []byte
	if *entries {
		each = func(e int64) {
			list = strconv.AppendInt(list[:0], e, 10)
			list = append(list, '\n')
			if !*asJSON {
				_, _ = out.Write(list)
			}
		}
	}
	check, err := reaper.VerifyDraw(cctx, mysql, id, each)
	if err != nil {
		return err
	}
	if *asJSON {
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
