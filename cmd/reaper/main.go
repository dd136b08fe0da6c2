// Command reaper takes over entries crashed workers left pending,
// dead-letters poison entries, cancels unpaid orders and releases their
// stock. "reaper reconcile [--repair]" compares Redis with MySQL and the
// streams (and rebuilds Redis); "reaper migrate" applies the migrations.
// Configuration: FLASHSALE_* variables (README).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/app"
	"github.com/flashsale/flashsale/pkg/reaper"
)

type config struct {
	app.Common
	reaper.Config
}

func (c *config) Base() app.Common { return c.Common }

// Validate fills the defaults and refuses wrong values before anything is
// dialled (see app.Main).
func (c *config) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	c.Config.SetDefaults()
	return c.Config.Validate()
}

func main() {
	app.Main(&config{}, run, app.Command[*config]{Name: "reconcile", Run: reconcile},
		app.Command[*config]{Name: "deadletters", Run: deadLetters})
}

func run(ctx context.Context, cfg *config, rt *app.Runtime) error {
	if cfg.Consumer == "" {
		host, err := os.Hostname()
		if err != nil {
			return err
		}
		cfg.Consumer = "reaper-" + host
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
	reaper.PrintChecks(os.Stdout, checks, 20)
	differ := 0
	for _, c := range checks {
		if len(c.Differences) > 0 && !c.Repaired {
			differ++
		}
	}
	rt.Log.Info("reconcile done", zap.Int("vouchers", len(checks)), zap.Int("differing", differ), zap.Bool("repair", *repair))
	if differ > 0 {
		return fmt.Errorf("%d vouchers differ (run with --repair to rebuild Redis)", differ)
	}
	return nil
}

// deadLetters lists each partition's dead letters and, with
// --trim-older-than, deletes those dead-lettered longer ago than that.
// Dead letters are never trimmed on their own: read them first
// (docs/RUNBOOK.md).
func deadLetters(ctx context.Context, cfg *config, rt *app.Runtime, args []string) error {
	fs := flag.NewFlagSet("deadletters", flag.ContinueOnError)
	olderThan := fs.Duration("trim-older-than", 0, "delete the dead letters dead-lettered longer ago than this (e.g. 720h); 0 lists only")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *olderThan < 0 {
		return fmt.Errorf("--trim-older-than must not be negative, got %s", *olderThan)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	redis, err := cfg.Redis(cctx, 2)
	if err != nil {
		return err
	}
	defer redis.Client().Close()
	before := time.Now().Add(-*olderThan)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "partition\tdead letters\toldest\ttrimmed\t")
	var total, trimmed int64
	for p := range redis.Partitions() {
		var n int64
		if *olderThan > 0 {
			if n, err = redis.TrimDeadLetters(cctx, p, before); err != nil {
				return err
			}
		}
		st, err := redis.DeadLetterStats(cctx, p)
		if err != nil {
			return err
		}
		oldest := "-"
		if !st.Oldest.IsZero() {
			oldest = st.Oldest.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%d\t\n", p, st.Count, oldest, n)
		total += st.Count
		trimmed += n
	}
	tw.Flush()
	rt.Log.Info("dead letters", zap.Int64("left", total), zap.Int64("trimmed", trimmed), zap.Duration("trim_older_than", *olderThan))
	return nil
}
