package app

// The command line: help, version, migrate and each binary's commands,
// their subcommands, flags, usage and exit codes. A command line is parsed
// whole, to the last flag, before any configuration is read or anything
// is dialled: -h at any depth answers its own help, and a mistyped
// command, subcommand or flag is said in plain text, exit 2.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Command is a command of a binary (reaper report, reaper deadletters
// list, worker migrate status).
type Command[C any] struct {
	Name string
	// Summary is one line on what it does.
	Summary string
	// Task groups the command in the binary's help (reports, dead
	// letters, migrations, ...).
	Task string
	// Args names its positional arguments in the usage line
	// ("VOUCHER_ID"); NArgs is how many it takes (-1: any number).
	Args  string
	NArgs int
	// Flags declares its flags; Run reads the values they bind.
	Flags func(fs *flag.FlagSet)
	// Sub are its subcommands, named by the argument after its name. Run,
	// when set, runs when none is named.
	Sub []Command[C]
	// ExitNo is what exit status 1 means for it, if it uses it
	// ("the stores differ").
	ExitNo string
	// Run runs it with its positional arguments, after the configuration
	// is read and checked.
	Run func(ctx context.Context, cfg C, rt *Runtime, args []string) error
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

// errUsage is a command line that names no command, subcommand or flag
// the binary has: said in plain text, exit 2, before anything else.
type errUsage struct{ msg string }

func (e errUsage) Error() string { return e.msg }

// typed is a command line resolved to the command it runs: its path of
// names (report; deadletters list) and its positional arguments.
type typed[C any] struct {
	path []string
	cmd  *Command[C]
	args []string
}

func (t typed[C]) name() string { return strings.Join(t.path, " ") }

// resolve finds the command args name (args[0] is a command of cmds) and
// parses its flags. help is true when they ask for its usage.
func resolve[C any](cmds []Command[C], args []string) (t typed[C], help bool, err error) {
	i := slices.IndexFunc(cmds, func(c Command[C]) bool { return c.Name == args[0] })
	if i < 0 {
		return t, false, errUsage{fmt.Sprintf("unknown command %q (commands: %s)", args[0], strings.Join(names(cmds), ", "))}
	}
	t.cmd, t.path, args = &cmds[i], []string{args[0]}, args[1:]
	for len(t.cmd.Sub) > 0 && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		j := slices.IndexFunc(t.cmd.Sub, func(c Command[C]) bool { return c.Name == args[0] })
		if j < 0 {
			if t.cmd.Run == nil || t.cmd.NArgs == 0 {
				return t, false, errUsage{fmt.Sprintf("unknown %s subcommand %q (subcommands: %s)", t.name(), args[0], strings.Join(names(t.cmd.Sub), ", "))}
			}
			break // a positional argument of the command itself
		}
		t.cmd, t.path, args = &t.cmd.Sub[j], append(t.path, args[0]), args[1:]
	}
	fs := t.cmd.flagSet(t.name())
	for len(args) > 0 { // flags before and after the positional arguments
		if negative(args[0]) { // a value, never a flag: the command says what it wants
			t.args, args = append(t.args, args[0]), args[1:]
			continue
		}
		if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
			return t, true, nil
		} else if err != nil {
			return t, false, errUsage{err.Error()}
		}
		if args = fs.Args(); len(args) > 0 {
			t.args, args = append(t.args, args[0]), args[1:]
		}
	}
	switch {
	case t.cmd.Run == nil:
		return t, false, errUsage{fmt.Sprintf("%s needs a subcommand: %s", t.name(), strings.Join(names(t.cmd.Sub), ", "))}
	case t.cmd.NArgs >= 0 && len(t.args) != t.cmd.NArgs:
		if t.cmd.NArgs == 0 {
			return t, false, errUsage{fmt.Sprintf("%s takes no argument, got %q", t.name(), t.args[0])}
		}
		want := strings.Fields(t.cmd.Args)
		switch {
		case len(t.args) > 0 && len(t.args) < len(want):
			return t, false, errUsage{fmt.Sprintf("%s %s: %s is missing", t.name(), t.cmd.Args, strings.Join(want[len(t.args):], " "))}
		case len(t.args) > len(want):
			return t, false, errUsage{fmt.Sprintf("%s takes %s, and got %d arguments (quote one with spaces)", t.name(), t.cmd.Args, len(t.args))}
		}
		return t, false, errUsage{fmt.Sprintf("%s needs %s", t.name(), t.cmd.Args)}
	}
	return t, false, nil
}

// negative reports an argument that is a negative number ("-5", "-0.5"):
// no flag starts with a digit.
func negative(arg string) bool {
	return len(arg) > 1 && arg[0] == '-' && arg[1] >= '0' && arg[1] <= '9'
}

// flagSet is c's flags, parsed quietly: errors and help are printed by Main.
func (c *Command[C]) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if c.Flags != nil {
		c.Flags(fs)
	}
	return fs
}

func names[C any](cmds []Command[C]) []string {
	out := make([]string, len(cmds))
	for i, c := range cmds {
		out[i] = c.Name
	}
	return out
}

// Main runs a binary: with no argument its role, else the command the
// arguments name ("help", "version", "migrate" and commands), with a
// context cancelled on SIGTERM or SIGINT. The command line is parsed
// before the environment is read; then the configuration is read,
// defaulted and checked before anything is dialled. The role ends every
// failure in one JSON log line and exit status 1; a command in one plain
// line on stderr and exit status 2 (or its ExitError's).
func Main[C Config](cfg C, run func(ctx context.Context, cfg C, rt *Runtime) error, commands ...Command[C]) {
	bin := filepath.Base(os.Args[0])
	commands = append([]Command[C]{migrateCommand[C]()}, commands...)
	var t *typed[C]
	if args := os.Args[1:]; len(args) > 0 {
		switch args[0] {
		case "help", "-h", "-help", "--help":
			switch {
			case len(args) == 1:
				PrintHelp(os.Stdout, commands)
			case len(args) == 2 && args[0] == "help" && args[1] == "config":
				PrintConfig(os.Stdout, cfg)
			default:
				usageFail(bin, "", fmt.Sprintf("unknown help topic %q: %s help lists the commands, %s help config the variables", strings.Join(args[1:], " "), bin, bin))
			}
			return
		case "version", "--version":
			fmt.Println(ReadBuild().String())
			return
		}
		if strings.HasPrefix(args[0], "-") {
			usageFail(bin, "", fmt.Sprintf("unknown flag %s: the role takes none (%s help lists the commands, %s help config the variables)", args[0], bin, bin))
		}
		r, help, err := resolve(commands, args)
		var ue errUsage
		switch {
		case help:
			printUsage(os.Stdout, bin, r)
			return
		case errors.As(err, &ue):
			usageFail(bin, r.name(), ue.msg)
		}
		t = &r
	}
	bootLog, _, _ := NewLoggers("info", "json", false)
	fail := func(err error) {
		if t != nil {
			fmt.Fprintf(os.Stderr, "%s %s: %v\n", bin, t.name(), err)
			os.Exit(ExitFailed)
		}
		bootLog.Error("invalid configuration", zap.Error(err))
		bootLog.Sync() //nolint:errcheck
		os.Exit(1)
	}
	old, err := Load(cfg)
	if err != nil {
		fail(err)
	}
	for _, o := range old {
		bootLog.Warn("a variable read under its old name, which the next release will not read: rename it", zap.String("variable", o))
	}
	cfg.SetDefaults()
	check := cfg.Validate
	if t != nil && t.cmd.Check != nil {
		check = func() error { return t.cmd.Check(cfg) }
	}
	if err := check(); err != nil {
		fail(err)
	}
	c := cfg.Base()
	c.applyMemoryLimit()
	level := c.LogLevel
	if t != nil && level != "debug" {
		// A person reads the command's output and its one line of error;
		// the JSON log keeps only errors (debug shows everything).
		level = "error"
	}
	log, audit, err := NewLoggers(level, c.LogFormat, c.AuditLog)
	if err != nil {
		fail(err)
	}
	// go-redis's own lines (pool and connection trouble) in the same JSON
	// as everything else, instead of plain text on stderr.
	redis.SetLogger(redisLogger{log.Named("redis")})
	reg := prometheus.NewRegistry()
	reg.MustRegister(RuntimeCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		ReadBuild().Collector())
	rt := &Runtime{Log: log, Audit: audit, Actions: log, Registry: reg}
	if t != nil {
		rt.Progress = os.Stderr
		if level != "debug" {
			if rt.Actions, _, err = NewLoggers("info", c.LogFormat, false); err != nil {
				fail(err)
			}
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	stopTracing, err := c.StartTracing(ctx, bin)
	if err != nil {
		fail(err)
	}
	code := 0
	if t == nil {
		if err := run(ctx, cfg, rt); err != nil {
			log.Error("exiting", zap.Error(err))
			code = 1
		}
	} else if err := t.cmd.Run(ctx, cfg, rt, t.args); err != nil {
		fmt.Fprintf(os.Stderr, "%s %s: %v\n", bin, t.name(), err)
		code = ExitFailed
		var ee *ExitError
		if errors.As(err, &ee) {
			code = ee.Code
		}
	}
	// The spans and logs are flushed here, not deferred: what a failing
	// process did is what they are most wanted for, and os.Exit runs no
	// deferred call.
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = stopTracing(sctx) // flush the spans in hand
	cancel()
	for _, l := range []*zap.Logger{log, audit, rt.Actions} {
		l.Sync() //nolint:errcheck
	}
	if code != 0 {
		os.Exit(code)
	}
}

// usageFail says what is wrong with a command line, and where its usage
// is, and exits 2.
func usageFail(bin, name, msg string) {
	where := strings.TrimSpace(bin + " " + name)
	fmt.Fprintf(os.Stderr, "%s: %s\n(%s -h shows the usage)\n", where, msg, where)
	os.Exit(ExitFailed)
}

// printUsage writes a command's usage (its -h): the usage line, what it
// does, its subcommands, its flags and what its exit status means.
func printUsage[C any](w io.Writer, bin string, t typed[C]) {
	c := t.cmd
	line := bin + " " + t.name()
	if len(c.Sub) > 0 {
		line += " SUBCOMMAND"
		if c.Run != nil {
			line = bin + " " + t.name() + " [SUBCOMMAND]"
		}
	}
	fs := c.flagSet(t.name())
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		line += " [flags]"
	}
	if c.Args != "" {
		line += " " + c.Args
	}
	fmt.Fprintf(w, "usage: %s\n\n%s\n", line, c.Summary)
	if len(c.Sub) > 0 {
		fmt.Fprintf(w, "\nSubcommands:\n")
		for _, s := range c.Sub {
			fmt.Fprintf(w, "  %-10s %s\n", s.Name, s.Summary)
		}
	}
	if hasFlags {
		fmt.Fprintf(w, "\nFlags:\n")
		printFlags(w, fs)
	}
	exit := "0 done, 2 failed or misused"
	if c.ExitNo != "" {
		exit = "0 done, 1 " + c.ExitNo + ", 2 failed or misused"
	}
	fmt.Fprintf(w, "\nExit status: %s. Configuration comes from FLASHSALE_* variables (%s help config lists them).\n", exit, bin)
}

// printFlags lists fs's flags the way they are typed: --name VALUE.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		head := "--" + f.Name
		if kind != "" {
			head += " " + kind
		}
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" && !strings.Contains(usage, "default:") { // a usage that words its default keeps its words
			usage += " (default " + f.DefValue + ")"
		}
		fmt.Fprintf(w, "  %-26s %s\n", head, usage)
	})
}

// Duration is a flag's length of time: Go's durations (90m, 36h) and
// whole days (30d).
type Duration time.Duration

func (d *Duration) String() string { return time.Duration(*d).String() }

// Set reads "30d" as 30 × 24 h, anything else as time.ParseDuration does.
func (d *Duration) Set(s string) error {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int64
		if _, err := fmt.Sscanf(days, "%d", &n); err == nil && fmt.Sprint(n) == days && n >= 0 {
			*d = Duration(time.Duration(n) * 24 * time.Hour)
			return nil
		}
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration (30d, 36h, 90m)", s)
	}
	*d = Duration(v)
	return nil
}

// RuntimeCollector is the Go runtime's collector every role registers:
// the default set (memory, collections, goroutines), the scheduler's
// latencies (go_sched_latencies_seconds: how long a goroutine that could
// run waited to run, one transition in eight sampled) and the goroutines
// created (go_sched_goroutines_created_goroutines_total); make bench
// reads both per request.
func RuntimeCollector() prometheus.Collector {
	return collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/sched/(latencies:seconds|goroutines-created:goroutines)$`)}))
}
