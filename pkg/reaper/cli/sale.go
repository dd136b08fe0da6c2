package cli

// Running a sale from the command line: create, pause, resume, top-up,
// split and extend do what the admin API's creation, pause, resume and
// PATCH do, under the same rules (pkg/voucher) and on the same record
// (voucher_actions, by cli:USER). MySQL records the change, then Redis
// takes it (pkg/settle); when Redis cannot take it now, the change stands
// and the reaper applies it.

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"time"

	"github.com/flashsale/flashsale/pkg/app"
	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/settle"
	"github.com/flashsale/flashsale/pkg/voucher"
)

// saleCommands are pause, resume, top-up, split and extend.
func saleCommands() []app.Command[*config] {
	var dry bool
	var to string
	dryRun := func(fs *flag.FlagSet) {
		fs.BoolVar(&dry, "dry-run", false, "say what would change, and change nothing")
	}
	pause := func(paused bool) app.Command[*config] {
		name, summary := "pause", "pause a sale: its claims answer 409 paused until it is resumed"
		if !paused {
			name, summary = "resume", "resume a paused sale"
		}
		return app.Command[*config]{Name: name, Task: "Running a sale", Args: "VOUCHER_ID", NArgs: 1, Summary: summary, Flags: dryRun,
			Run: func(ctx context.Context, cfg *config, rt *app.Runtime, args []string) error {
				return changeSale(ctx, cfg, rt, args[0], dry, func(v db.Voucher) (string, error) {
					switch {
					case v.Paused != paused:
						return name, nil
					case paused:
						return "", nothingToDo("paused already")
					}
					return "", nothingToDo("not paused, so there is nothing to resume")
				}, func(ctx context.Context, mysql *db.Store, v db.Voucher, now time.Time) (db.Voucher, db.VoucherChange, error) {
					return mysql.SetPaused(ctx, v.ID, paused, cliActor(), now)
				})
			}}
	}
	edit := func(ctx context.Context, cfg *config, rt *app.Runtime, arg string, req voucher.Change, what string) error {
		var e db.Edit
		return changeSale(ctx, cfg, rt, arg, dry, func(v db.Voucher) (string, error) {
			now := time.Now().UTC()
			var err error
			if e, err = req.Edit(now); err != nil {
				return "", err
			}
			e.By = cliActor()
			return what, req.Against(v, &e, now)
		}, func(ctx context.Context, mysql *db.Store, v db.Voucher, now time.Time) (db.Voucher, db.VoucherChange, error) {
			return mysql.ChangeVoucher(ctx, v.ID, e, now)
		})
	}
	return []app.Command[*config]{
		createCommand(), pause(true), pause(false),
		{Name: "top-up", Task: "Running a sale", Args: "VOUCHER_ID UNITS", NArgs: 2, Flags: dryRun,
			Summary: "add units to a sale of units (as PATCH add_stock): they sell at once",
			Run: func(ctx context.Context, cfg *config, rt *app.Runtime, args []string) error {
				n, err := wholeNumber("UNITS", args[1])
				if err != nil {
					return err
				}
				return edit(ctx, cfg, rt, args[0], voucher.Change{AddStock: &n}, "add "+args[1]+" units")
			}},
		{Name: "split", Task: "Running a sale", Args: "VOUCHER_ID BUCKETS", NArgs: 2, Flags: dryRun,
			Summary: "split a sale's Redis buckets to BUCKETS while it runs (as PATCH stock_buckets): the reaper's splitter does it within a second",
			Run: func(ctx context.Context, cfg *config, rt *app.Runtime, args []string) error {
				n, err := wholeNumber("BUCKETS", args[1])
				if err != nil {
					return err
				}
				return splitSale(ctx, cfg, rt, args[0], n, dry)
			}},
		{Name: "extend", Task: "Running a sale", Args: "VOUCHER_ID", NArgs: 1,
			Flags: func(fs *flag.FlagSet) {
				dryRun(fs)
				fs.StringVar(&to, "to", "", "required: the sale's new end, a `TIME` as 2026-12-24T22:00:00Z (RFC 3339)")
			},
			Summary: "move a sale's end (as PATCH ends_at)",
			Run: func(ctx context.Context, cfg *config, rt *app.Runtime, args []string) error {
				if to == "" {
					return errors.New("extend needs --to TIME, the sale's new end, as 2026-12-24T22:00:00Z (RFC 3339)")
				}
				if err := timeFlag("to", to); err != nil {
					return err
				}
				return edit(ctx, cfg, rt, args[0], voucher.Change{EndsAt: &to}, "end the sale at "+to)
			}},
	}
}

// timeFlag checks flag name's value v, a time, as the API will read it.
func timeFlag(name, v string) error {
	if _, err := time.Parse(time.RFC3339, v); err != nil {
		return fmt.Errorf("--%s must be a time as 2026-12-24T22:00:00Z (RFC 3339, with its zone: Z or +08:00): %q is not", name, v)
	}
	return nil
}

// wholeNumber reads arg, the command's argument name, as a whole number
// of 1 or more, or says what it is instead.
func wholeNumber(name, arg string) (int64, error) {
	n, err := strconv.ParseInt(arg, 10, 64)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%s must be a whole number of 1 or more: %q is not a whole number", name, arg)
	case n < 0:
		return 0, fmt.Errorf("%s must be a whole number of 1 or more: %s is negative", name, arg)
	case n == 0:
		return 0, fmt.Errorf("%s must be a whole number of 1 or more, not 0", name)
	}
	return n, nil
}

// nothingToDo is a check's answer when the voucher is as the command
// would leave it: said, and exit 0.
type nothingToDo string

func (n nothingToDo) Error() string { return string(n) }

// changeSale is one of the sale's commands: the voucher whose id is arg
// is read, check says what the change would do (or why it cannot be
// done), and unless dry, change records it in MySQL and Redis takes it.
func changeSale(ctx context.Context, cfg *config, rt *app.Runtime, arg string, dry bool,
	check func(v db.Voucher) (string, error),
	change func(ctx context.Context, mysql *db.Store, v db.Voucher, now time.Time) (db.Voucher, db.VoucherChange, error)) error {
	return withVoucher(ctx, cfg, arg, time.Minute, func(ctx context.Context, mysql *db.Store, v db.Voucher) error {
		what, err := check(v)
		var none nothingToDo
		if errors.As(err, &none) {
			fmt.Printf("voucher %d (%s): %s; nothing changed\n", v.ID, v.Name, none)
			return nil
		}
		if err != nil {
			return err
		}
		if dry {
			fmt.Printf("voucher %d (%s): would %s; nothing changed (--dry-run)\n", v.ID, v.Name, what)
			return nil
		}
		now := time.Now().UTC()
		v, ch, err := change(ctx, mysql, v, now)
		if err != nil {
			return err
		}
		if err := toRedis(ctx, cfg, rt, mysql, ch, now); err == nil {
			fmt.Printf("voucher %d (%s): done: %s\n", v.ID, v.Name, what)
			return nil
		}
		return fmt.Errorf("voucher %d: recorded in MySQL, not yet in Redis (the reaper applies it within its interval): %w", v.ID, err)
	})
}

// splitSale asks for voucher arg's buckets to be split to n (voucher.Split's
// rules, as PATCH stock_buckets): MySQL records it, the reaper's splitter
// does it.
func splitSale(ctx context.Context, cfg *config, rt *app.Runtime, arg string, n int64, dry bool) error {
	return withVoucher(ctx, cfg, arg, time.Minute, func(ctx context.Context, mysql *db.Store, v db.Voucher) error {
		if v.StockBuckets == int(n) || v.SplitTo == int(n) {
			fmt.Printf("voucher %d (%s): %d buckets asked already; nothing changed\n", v.ID, v.Name, n)
			return nil
		}
		if err := voucher.Split(v, n, time.Now()); err != nil {
			return err
		}
		if cfg.RedisCluster && !v.Splitting() { // a cluster's masters share the buckets evenly; one Redis has one thread
			redis, err := cfg.Redis(ctx, 2)
			if err != nil {
				return err
			}
			defer redis.Client().Close()
			sp, err := redis.BucketSpread(ctx, v.ID, int(n), max(v.StockBuckets, 1))
			if err != nil {
				return err
			}
			if err := voucher.Spread(n, sp); err != nil {
				return err
			}
		}
		what := fmt.Sprintf("split its %d Redis buckets to %d", max(v.StockBuckets, 1), n)
		if dry {
			fmt.Printf("voucher %d (%s): would %s; nothing changed (--dry-run)\n", v.ID, v.Name, what)
			return nil
		}
		_, actions, err := mysql.AskSplit(ctx, v.ID, int(n), cliActor(), func(v db.Voucher) error { return voucher.Split(v, n, time.Now()) })
		if err != nil {
			return err
		}
		voucher.LogActions(rt.Actions, actions)
		fmt.Printf("voucher %d (%s): asked: %s (the reaper's splitter does it within a second)\n", v.ID, v.Name, what)
		return nil
	})
}

// cliActor is who runs this command: "cli:" and the operating system's
// user, or its uid where it has no name (a container's user often has
// none); voucher_actions records it.
func cliActor() db.Actor {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	return db.CLIActor(cmp.Or(name, "uid-"+strconv.Itoa(os.Getuid())))
}

// toRedis logs the actions of ch, a change MySQL has recorded, and gives
// it to Redis. An error is Redis's: the change stands in MySQL, and the
// reaper applies it within its interval; a change Redis cannot take yet
// by its own rules (settle.Later: a split under way) is no error.
func toRedis(ctx context.Context, cfg *config, rt *app.Runtime, mysql *db.Store, ch db.VoucherChange, now time.Time) error {
	voucher.LogActions(rt.Actions, ch.Actions)
	redis, err := cfg.Redis(ctx, 2)
	if err != nil {
		return err
	}
	defer redis.Client().Close()
	if _, err = settle.Changes(ctx, redis, mysql, []db.VoucherChange{ch}, now); settle.Later(err) {
		return nil
	}
	return err
}
