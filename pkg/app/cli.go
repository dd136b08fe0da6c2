package app

// The command line: help, version, migrate and each binary's
// subcommands, their usage and exit codes.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Command is a subcommand of a binary besides migrate; args are the
// arguments after its name.
type Command[C any] struct {
	Name string
	// Summary is one line on what it does; Usage its arguments and flags,
	// one per line (help and NAME -h print them).
	Summary, Usage string
	Run            func(ctx context.Context, cfg C, rt *Runtime, args []string) error
	// Check, when set, replaces the configuration's Validate for this
	// command: a command that needs fewer variables than the role.
	Check func(cfg C) error
}

// Exit codes of the commands a person types (not of the roles' processes,
// which exit 1 on any failure, with a JSON log line): 0 done, 1 done and
// the answer is "no" (reconcile: the stores differ), 2 failed or misused.
const (
	ExitNo     = 1
	ExitFailed = 2
)

// ExitError makes a command exit with Code (ExitNo, say) instead of
// ExitFailed.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// wantsHelp reports whether args ask for a command's usage.
func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			return true
		}
	}
	return false
}

// Config is what a binary's configuration offers Main: its common part,
// its defaults and a check of every value.
type Config interface {
	Base() Common
	// SetDefaults fills the fields left zero with their defaults.
	SetDefaults()
	// Validate reports the first wrong value, naming its variable; Main
	// calls it once, after SetDefaults.
	Validate() error
}

// Main runs a binary: "help" and "version" answer without reading the
// environment; otherwise it reads cfg from the environment, validates it,
// builds the loggers and the metrics registry, runs "migrate" or one of
// commands when named by the first argument, and run otherwise, with a
// context cancelled on SIGTERM or SIGINT. Every failure ends in one log line
// and exit status 1; a bad value does so before anything is dialled.
func Main[C Config](cfg C, run func(ctx context.Context, cfg C, rt *Runtime) error, commands ...Command[C]) {
	bin := filepath.Base(os.Args[0])
	// A command a person typed (not the role's process, nor migrate, which
	// init containers run) answers in plain text on stderr, with the exit
	// codes above.
	var typed *Command[C]
	if len(os.Args) > 1 {
		switch name := os.Args[1]; name {
		case "help", "-h", "-help", "--help":
			PrintHelp(os.Stdout, cfg, commands)
			return
		case "version", "--version":
			fmt.Println(ReadBuild().String())
			return
		case "migrate":
		default:
			for i := range commands {
				if commands[i].Name == name {
					typed = &commands[i]
				}
			}
			if typed == nil {
				fmt.Fprintf(os.Stderr, "%s: unknown command %q (commands: %s; %s help describes them)\n", bin, name, strings.Join(commandNames(commands), ", "), bin)
				os.Exit(ExitFailed)
			}
			if wantsHelp(os.Args[2:]) {
				printUsage(os.Stdout, bin, *typed)
				return
			}
		}
	}
	bootLog, _, _ := NewLoggers("info", "json", false)
	fail := func(err error) {
		if typed != nil {
			fmt.Fprintf(os.Stderr, "%s %s: %v\n", bin, typed.Name, err)
			os.Exit(ExitFailed)
		}
		bootLog.Error("invalid configuration", zap.Error(err))
		bootLog.Sync() //nolint:errcheck
		os.Exit(1)
	}
	if err := Load(cfg); err != nil {
		fail(err)
	}
	cfg.SetDefaults()
	check := cfg.Validate
	if typed != nil && typed.Check != nil {
		check = func() error { return typed.Check(cfg) }
	}
	if err := check(); err != nil {
		fail(err)
	}
	c := cfg.Base()
	c.applyMemoryLimit()
	level := c.LogLevel
	if typed != nil && level != "debug" {
		// A person reads the command's output and its one line of error;
		// the JSON log keeps only errors (debug shows everything).
		level = "error"
	}
	log, audit, err := NewLoggers(level, c.LogFormat, c.AuditLog)
	if err != nil {
		fail(err)
	}
	defer log.Sync()   //nolint:errcheck
	defer audit.Sync() //nolint:errcheck
	// go-redis's own lines (pool and connection trouble) in the same JSON
	// as everything else, instead of plain text on stderr.
	redis.SetLogger(redisLogger{log.Named("redis")})
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		ReadBuild().Collector())
	rt := &Runtime{Log: log, Audit: audit, Registry: reg}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	stopTracing, err := c.StartTracing(ctx, filepath.Base(os.Args[0]))
	if err != nil {
		fail(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = stopTracing(sctx) // flush the spans in hand
	}()
	err = dispatch(ctx, cfg, rt, os.Args[1:], run, commands)
	if err != nil && typed != nil {
		log.Sync() //nolint:errcheck
		fmt.Fprintf(os.Stderr, "%s %s: %v\n", bin, typed.Name, err)
		code := ExitFailed
		var ee *ExitError
		if errors.As(err, &ee) {
			code = ee.Code
		}
		os.Exit(code)
	}
	if err != nil {
		log.Error("exiting", zap.Error(err))
		log.Sync() //nolint:errcheck
		os.Exit(1)
	}
}

func dispatch[C Config](ctx context.Context, cfg C, rt *Runtime, args []string,
	run func(ctx context.Context, cfg C, rt *Runtime) error, commands []Command[C]) error {
	if len(args) == 0 {
		return run(ctx, cfg, rt)
	}
	if args[0] == "migrate" {
		return cfg.Base().Migrate(ctx, rt.Log)
	}
	for _, c := range commands {
		if c.Name == args[0] {
			return c.Run(ctx, cfg, rt, args[1:])
		}
	}
	return fmt.Errorf("unknown command %q (commands: %s)", args[0], strings.Join(commandNames(commands), ", "))
}

func commandNames[C any](commands []Command[C]) []string {
	names := []string{"migrate", "help", "version"}
	for _, c := range commands {
		names = append(names, c.Name)
	}
	return names
}

// printUsage writes a command's usage (its -h).
func printUsage[C any](w io.Writer, bin string, c Command[C]) {
	fmt.Fprintf(w, "usage: %s %s %s\n\n%s\n", bin, c.Name, strings.SplitN(c.Usage, "\n", 2)[0], c.Summary)
	if rest := strings.SplitN(c.Usage, "\n", 2); len(rest) == 2 {
		fmt.Fprintf(w, "\n%s\n", rest[1])
	}
	fmt.Fprintf(w, "\nConfiguration comes from FLASHSALE_* variables (%s help lists them).\nExit status: 0 done, 1 done and the answer is no (reconcile: the stores differ), 2 failed or misused.\n", bin)
}
