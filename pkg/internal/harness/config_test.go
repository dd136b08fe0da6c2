package harness_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/token"
	schema "github.com/flashsale/flashsale/sql"
)

// A binary that cannot start says why in one JSON log line and exits 1.
func TestBinariesRefuseBadConfigInOneLine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	dir := t.TempDir()
	require.NoError(t, harness.Build(dir, false, "gateway", "worker", "reaper"))
	secret := "FLASHSALE_JWT_SECRET=" + strings.Repeat("s", 32)
	admin := "FLASHSALE_ADMIN_TOKEN=" + strings.Repeat("a", 32)
	tests := []struct {
		name, bin string
		env       []string
		args      []string
		want      string
	}{
		{"no admin token", "gateway", []string{secret}, nil, "FLASHSALE_ADMIN_TOKEN"},
		// Unprefixed variables are never read.
		{"unprefixed admin token", "gateway", []string{secret, "ADMIN_TOKEN=x"}, nil, "FLASHSALE_ADMIN_TOKEN"},
		{"no jwt secret", "gateway", []string{admin}, nil, "FLASHSALE_JWT_SECRET"},
		{"short admin token", "gateway", []string{secret, "FLASHSALE_ADMIN_TOKEN=admin"}, nil, "FLASHSALE_ADMIN_TOKEN"},
		{"short previous jwt secret", "gateway", []string{secret, admin, "FLASHSALE_JWT_PREVIOUS_SECRET=old"}, nil, "FLASHSALE_JWT_PREVIOUS_SECRET"},
		{"missing key set", "gateway", []string{admin, "FLASHSALE_JWT_JWKS_FILE=/nonexistent/jwks.json"}, nil, "FLASHSALE_JWT_JWKS_FILE"},
		{"short token lifetime", "gateway", []string{secret, admin, "FLASHSALE_JWT_MAX_LIFETIME=1s"}, nil, "FLASHSALE_JWT_MAX_LIFETIME"},
		{"bad log level", "worker", []string{"FLASHSALE_LOG_LEVEL=loud"}, nil, "FLASHSALE_LOG_LEVEL"},
		{"bad duration", "worker", []string{"FLASHSALE_WORKER_BLOCK=soon"}, nil, "FLASHSALE_WORKER_BLOCK"},
		// Values that can never work exit at once instead of being retried
		// as "waiting for redis and mysql" or replaced by a default.
		{"zero partitions", "worker", []string{"FLASHSALE_STREAM_PARTITIONS=0"}, nil, "FLASHSALE_STREAM_PARTITIONS"},
		{"too many partitions", "reaper", []string{"FLASHSALE_STREAM_PARTITIONS=5000"}, nil, "FLASHSALE_STREAM_PARTITIONS"},
		// The events' sinks.
		{"webhook url not http", "reaper", []string{"FLASHSALE_EVENTS_WEBHOOK_URLS=ftp://hooks.example/x"}, nil, "FLASHSALE_EVENTS_WEBHOOK_URLS"},
		{"webhook secret without whsec_", "reaper", []string{"FLASHSALE_EVENTS_WEBHOOK_URLS=https://hooks.example/x",
			"FLASHSALE_EVENTS_WEBHOOK_SECRET=c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0"}, nil, "FLASHSALE_EVENTS_WEBHOOK_SECRET"},
		{"webhook without a secret", "reaper", []string{"FLASHSALE_EVENTS_WEBHOOK_URLS=https://hooks.example/x"}, nil, "FLASHSALE_EVENTS_WEBHOOK_SECRET"},
		{"kafka topic without brokers", "reaper", []string{"FLASHSALE_EVENTS_KAFKA_TOPIC=orders"}, nil, "FLASHSALE_EVENTS_KAFKA_BROKERS"},
		{"kafka sasl unknown", "reaper", []string{"FLASHSALE_EVENTS_KAFKA_BROKERS=k:9092", "FLASHSALE_EVENTS_KAFKA_SASL_MECHANISM=GSSAPI"}, nil, "FLASHSALE_EVENTS_KAFKA_SASL_MECHANISM"},
		{"malformed dsn", "worker", []string{"FLASHSALE_MYSQL_DSN=root:secret@tcp(db:3306"}, nil, "FLASHSALE_MYSQL_DSN"},
		{"bad redis addr", "reaper", []string{"FLASHSALE_REDIS_ADDR=redis"}, nil, "FLASHSALE_REDIS_ADDR"},
		{"negative batch", "worker", []string{"FLASHSALE_WORKER_BATCH_SIZE=-5"}, nil, "FLASHSALE_WORKER_BATCH_SIZE"},
		{"negative backoff", "worker", []string{"FLASHSALE_WORKER_RETRY_BACKOFF=-1s"}, nil, "FLASHSALE_WORKER_RETRY_BACKOFF"},
		{"negative redis timeout", "worker", []string{"FLASHSALE_REDIS_TIMEOUT=-1s"}, nil, "FLASHSALE_REDIS_TIMEOUT"},
		{"zero max conns", "reaper", []string{"FLASHSALE_MYSQL_MAX_CONNS=-1"}, nil, "FLASHSALE_MYSQL_MAX_CONNS"},
		{"block over a third of min idle", "worker", []string{"FLASHSALE_WORKER_BLOCK=5s", "FLASHSALE_TAKEOVER_MIN_IDLE=6s"}, nil, "FLASHSALE_WORKER_BLOCK"},
		{"zero max deliveries", "reaper", []string{"FLASHSALE_MAX_DELIVERIES=-1"}, nil, "FLASHSALE_MAX_DELIVERIES"},
		{"negative reaper interval", "reaper", []string{"FLASHSALE_REAPER_INTERVAL=-5s"}, nil, "FLASHSALE_REAPER_INTERVAL"},
		{"short jwt secret", "gateway", []string{admin, "FLASHSALE_JWT_SECRET=short"}, nil, "FLASHSALE_JWT_SECRET"},
		{"bad time zone", "gateway", []string{secret, admin, "FLASHSALE_TIMEZONE=Mars/Olympus"}, nil, "FLASHSALE_TIMEZONE"},
		{"negative claim timeout", "gateway", []string{secret, admin, "FLASHSALE_CLAIM_TIMEOUT=-1s"}, nil, "FLASHSALE_CLAIM_TIMEOUT"},
		{"zero mysql inflight", "gateway", []string{secret, admin, "FLASHSALE_MYSQL_MAX_INFLIGHT=-2"}, nil, "FLASHSALE_MYSQL_MAX_INFLIGHT"},
		{"short access key", "gateway", []string{secret, admin, "FLASHSALE_ACCESS_KEY=short"}, nil, "FLASHSALE_ACCESS_KEY"},
		{"an embedding origin with a path", "gateway", []string{secret, admin, "FLASHSALE_QUEUE_EMBED_ORIGINS=https://shop.example/buy"}, nil, "FLASHSALE_QUEUE_EMBED_ORIGINS"},
		{"an embedding origin without a scheme", "gateway", []string{secret, admin, "FLASHSALE_QUEUE_EMBED_ORIGINS=shop.example"}, nil, "FLASHSALE_QUEUE_EMBED_ORIGINS"},
		{"a wildcard embedding origin", "gateway", []string{secret, admin, "FLASHSALE_QUEUE_EMBED_ORIGINS=https://shop.example,https://*.example"}, nil, "FLASHSALE_QUEUE_EMBED_ORIGINS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(dir, tt.bin), tt.args...)
			cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, tt.env...)
			// Nothing listens on these: a binary that dialled instead of
			// refusing the value would retry until the deadline.
			cmd.Env = append(cmd.Env, "FLASHSALE_OPS_ADDR=127.0.0.1:0")
			start := time.Now()
			out, err := cmd.CombinedOutput()
			require.Less(t, time.Since(start), 5*time.Second, "exits within 5s")
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit)
			require.Equal(t, 1, exit.ExitCode())
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			require.Len(t, lines, 1, "one line: %s", out)
			var entry map[string]any
			require.NoError(t, json.Unmarshal([]byte(lines[0]), &entry), "JSON: %s", out)
			require.Equal(t, "error", entry["level"])
			require.Contains(t, entry["error"], tt.want)
			require.NotContains(t, string(out), "panic")
		})
	}
}

// help and version answer without secrets or servers.
func TestHelpAndVersionNeedNoSecrets(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	dir := t.TempDir()
	require.NoError(t, harness.Build(dir, false, "gateway", "worker", "reaper"))
	for _, bin := range []string{"gateway", "worker", "reaper"} {
		cmd := exec.Command(filepath.Join(dir, bin), "help", "config")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s help config: %s", bin, out)
		require.Contains(t, string(out), "FLASHSALE_MYSQL_DSN")
		require.Contains(t, string(out), "FLASHSALE_STREAM_PARTITIONS")
		require.Contains(t, string(out), "root@tcp(127.0.0.1:3306)/flashsale", "defaults shown")
		if bin == "gateway" {
			require.Contains(t, string(out), "FLASHSALE_JWT_SECRET")
		}
		if bin == "worker" {
			require.Contains(t, string(out), "FLASHSALE_WORKER_MAX_ATTEMPTS")
		}
		cmd = exec.Command(filepath.Join(dir, bin), "version")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		out, err = cmd.CombinedOutput()
		require.NoError(t, err, "%s version: %s", bin, out)
		require.Regexp(t, `^flashsale \S+ commit \S+`, string(out))
	}
}

// The commands a person types: -h on each answers its usage on
// stdout and exits 0 with no secret and no server; a mistyped command or
// subcommand is said in plain text before anything is dialled, exit 2; a
// command that fails says so in plain text, exit 2.
func TestCommandsAnswerHelpAndSayWhatFailed(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	dir := t.TempDir()
	require.NoError(t, harness.Build(dir, false, "gateway", "reaper"))
	run := func(env []string, bin string, args ...string) (string, string, int) {
		return runIn(t, dir, env, bin, args...)
	}
	for _, c := range [][]string{{"reaper", "reconcile", "-h"}, {"reaper", "deadletters", "--help"}, {"reaper", "deadletters", "purge", "-h"}, {"reaper", "report", "-h"}, {"reaper", "draw", "-h"}, {"gateway", "smoke", "--help"}} {
		out, errOut, code := run(nil, c[0], c[1:]...)
		require.Zero(t, code, "%v: %s", c, errOut)
		require.Contains(t, out, "usage: "+c[0]+" "+c[1], "%v", c)
		require.Empty(t, errOut, "%v", c)
	}
	out, _, code := run(nil, "reaper", "help")
	require.Zero(t, code)
	require.Contains(t, out, "exit 0 when they agree, 1 when they differ, 2 when it failed")
	for _, task := range []string{"Reports:", "Draws:", "Dead letters:", "Stores:", "Migrations:"} {
		require.Contains(t, out, task, "the operator's commands listed by task")
	}
	require.Contains(t, out, "deadletters purge")
	require.Contains(t, out, "migrate status")
	// The commands on one screen; the variables on request.
	short, _, code := run(nil, "reaper", "-h")
	require.Zero(t, code)
	require.Equal(t, out, short, "-h is help")
	require.LessOrEqual(t, strings.Count(out, "\n"), 50, "the commands fit a screen: %s", out)
	require.NotContains(t, out, "FLASHSALE_REDIS_ADDR ")
	require.Contains(t, out, "reaper help config lists them")
	config, _, code := run(nil, "reaper", "help", "config")
	require.Zero(t, code)
	require.Contains(t, config, "FLASHSALE_REDIS_ADDR ")
	_, errOut, code := run(nil, "reaper", "help", "variables")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown help topic "variables"`)
	out, _, code = run(nil, "reaper", "reconcile", "-h")
	require.Zero(t, code)
	require.Contains(t, out, "--repair")
	require.Contains(t, out, "1 the stores differ", "only reconcile's help explains reconcile's exit 1")
	out, _, _ = run(nil, "reaper", "report", "-h")
	require.NotContains(t, out, "stores differ")

	out, errOut, code = run(nil, "reaper", "recocile")
	require.Equal(t, 2, code)
	require.Empty(t, out)
	require.Contains(t, errOut, `unknown command "recocile"`)

	// A server that is not there: the subcommand is judged first; a
	// failure is one plain line.
	closed := []string{"FLASHSALE_REDIS_ADDR=127.0.0.1:1", "FLASHSALE_MYSQL_DSN=root@tcp(127.0.0.1:1)/x", "FLASHSALE_REDIS_TIMEOUT=200ms"}
	_, errOut, code = run(closed, "reaper", "deadletters", "frobnicate")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown deadletters subcommand "frobnicate"`)
	require.NotContains(t, errOut, "connect")
	for args, want := range map[string]string{"": "report needs VOUCHER_ID", "x": "VOUCHER_ID must be a positive whole number", "1 2": "report takes VOUCHER_ID, and got 2 arguments"} {
		_, errOut, code = run(closed, "reaper", append([]string{"report"}, strings.Fields(args)...)...)
		require.Equal(t, 2, code, "report %s: %s", args, errOut)
		require.Contains(t, errOut, want)
		require.NotContains(t, errOut, "connect")
	}
	for args, want := range map[string]string{"": "draw needs a subcommand: verify", "check 1": `unknown draw subcommand "check"`,
		"verify": "draw verify needs VOUCHER_ID", "verify x": "VOUCHER_ID must be a positive whole number"} {
		_, errOut, code = run(closed, "reaper", append([]string{"draw"}, strings.Fields(args)...)...)
		require.Equal(t, 2, code, "draw %s: %s", args, errOut)
		require.Contains(t, errOut, want)
		require.NotContains(t, errOut, "connect")
	}
	_, errOut, code = run(closed, "reaper", "reconcile", "--bogus")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "reaper reconcile: flag provided but not defined: -bogus", "plain text, not a JSON line")
	require.Contains(t, errOut, "(reaper reconcile -h shows the usage)")
	require.Equal(t, 2, strings.Count(errOut, "\n"), "the error and where the usage is, once: %s", errOut)
	require.NotContains(t, errOut, `"level"`)
	_, errOut, code = run([]string{"FLASHSALE_STREAM_PARTITIONS=0"}, "reaper", "reconcile")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "FLASHSALE_STREAM_PARTITIONS")
	require.False(t, strings.HasPrefix(errOut, "{"), "plain text: %s", errOut)
}

// commandPaths reads the commands a binary's help lists ("report",
// "deadletters purge", "migrate status"), and adds the groups they sit in
// ("draw" for "draw verify").
func commandPaths(help string) []string {
	var paths []string
	add := func(p string) {
		if !slices.Contains(paths, p) {
			paths = append(paths, p)
		}
	}
	for _, line := range strings.Split(help, "\n") {
		if !strings.HasPrefix(line, "  ") || strings.HasPrefix(line, "   ") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimSpace(line), "  ")
		var words []string
		for _, w := range strings.Fields(first) {
			if strings.ToLower(w) != w || !regexp.MustCompile(`^[a-z]+$`).MatchString(w) {
				break
			}
			words = append(words, w)
		}
		if len(words) == 0 || words[0] == "help" || words[0] == "version" {
			continue
		}
		for i := range words {
			add(strings.Join(words[:i+1], " "))
		}
	}
	return paths
}

// Every command and subcommand of every binary, at every depth, answers
// -h with its own usage (exit 0) and an unknown flag with a plain error
// (exit 2), with no configuration and before anything is dialled: the
// stores' addresses point at a listener of the test's, which must see no
// connection. (worker migrate --help used to migrate the default DSN.)
func TestEveryCommandAnswersHelpAndBadFlagsWithoutDialling(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	dir := t.TempDir()
	require.NoError(t, harness.Build(dir, false, "gateway", "worker", "reaper"))
	trap, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer trap.Close()
	var dialled atomic.Int64
	go func() {
		for {
			c, err := trap.Accept()
			if err != nil {
				return
			}
			dialled.Add(1)
			c.Close()
		}
	}()
	env := []string{"FLASHSALE_REDIS_ADDR=" + trap.Addr().String(),
		"FLASHSALE_MYSQL_DSN=root@tcp(" + trap.Addr().String() + ")/flashsale", "FLASHSALE_OPS_ADDR=127.0.0.1:0"}
	run := func(env []string, bin string, args ...string) (string, string, int) {
		return runIn(t, dir, env, bin, args...)
	}
	tried := 0
	for _, bin := range []string{"gateway", "worker", "reaper"} {
		help, _, code := run(env, bin, "help")
		require.Zero(t, code)
		paths := commandPaths(help)
		require.Contains(t, paths, "migrate status", bin)
		for _, path := range paths {
			args := strings.Fields(path)
			for _, h := range []string{"-h", "--help"} {
				for _, e := range [][]string{env, nil} { // the trap, and no configuration at all
					out, errOut, code := run(e, bin, append(slices.Clone(args), h)...)
					require.Zero(t, code, "%s %s %s: %s", bin, path, h, errOut)
					require.Contains(t, out, "usage: "+bin+" "+path, "%s %s %s", bin, path, h)
					require.Contains(t, out, "Exit status:", "%s %s %s", bin, path, h)
					require.Empty(t, errOut, "%s %s %s", bin, path, h)
					tried++
				}
			}
			out, errOut, code := run(env, bin, append(slices.Clone(args), "--bogus")...)
			require.Equal(t, 2, code, "%s %s --bogus: %s", bin, path, errOut)
			require.Empty(t, out)
			require.Contains(t, errOut, "flag provided but not defined: -bogus", "%s %s", bin, path)
			require.Contains(t, errOut, "-h shows the usage", "%s %s", bin, path)
			tried++
		}
		_, errOut, code := run(env, bin, "--bogus")
		require.Equal(t, 2, code, "%s --bogus: %s", bin, errOut)
		require.Contains(t, errOut, "unknown flag --bogus")
	}
	_, errOut, code := run(env, "reaper", "draw", "verfy", "3")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown draw subcommand "verfy"`)
	_, errOut, code = run(env, "worker", "migrate", "statu")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown migrate subcommand "statu"`)
	t.Logf("%d command lines tried", tried)
	require.Zero(t, dialled.Load(), "a command line that asked for help or was misused dialled a store")
}

// migrate says what it would do and what it did: status lists each
// migration, --dry-run prints the SQL and applies nothing, and a database
// that does not exist is named with what to run.
func TestMigrateSaysWhatItDoes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	dir := t.TempDir()
	require.NoError(t, harness.Build(dir, false, "worker"))
	m := testsrv.NewMariaDB(t)
	migrate := func(dsn string, args ...string) (string, string, int) {
		return runIn(t, dir, []string{"FLASHSALE_MYSQL_DSN=" + dsn}, "worker", append([]string{"migrate"}, args...)...)
	}
	_, errOut, code := migrate(m.DSN("nosuchdb"))
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "CREATE DATABASE nosuchdb")
	require.Contains(t, errOut, "FLASHSALE_MYSQL_DSN")

	dsn, err := m.CreateDatabase("migrate")
	require.NoError(t, err)
	migs, err := schema.Migrations()
	require.NoError(t, err)
	status := func(want string) {
		t.Helper()
		out, errOut, code := migrate(dsn, "status")
		require.Zero(t, code, errOut)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, len(migs), out)
		for i, l := range lines {
			require.True(t, strings.HasPrefix(l, migs[i].Version), l)
			require.Contains(t, l, want, l)
		}
	}
	status("pending")
	out, errOut, code := migrate(dsn, "--dry-run")
	require.Zero(t, code, errOut)
	require.Contains(t, out, "-- "+migs[0].Version)
	require.Contains(t, out, "CREATE TABLE")
	status("pending") // a dry run applies nothing
	out, errOut, code = migrate(dsn)
	require.Zero(t, code, errOut)
	require.Contains(t, out, "applied "+migs[0].Version)
	status("applied")
	out, _, code = migrate(dsn)
	require.Zero(t, code)
	require.Contains(t, out, "nothing to apply")
}

// A second process on one host whose ops port is taken says which
// variable to change, before it waits for any store, and exits 1.
func TestATakenOpsPortNamesItsVariable(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	dir := t.TempDir()
	require.NoError(t, harness.Build(dir, false, "worker"))
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	cmd := exec.Command(filepath.Join(dir, "worker"))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "FLASHSALE_OPS_ADDR=" + taken.Addr().String(),
		"FLASHSALE_REDIS_ADDR=127.0.0.1:1", "FLASHSALE_MYSQL_DSN=root@tcp(127.0.0.1:1)/x"}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 1, ee.ExitCode())
	require.Contains(t, string(out), "FLASHSALE_OPS_ADDR")
	require.Contains(t, string(out), "port of its own")
	require.NotContains(t, string(out), "waiting for redis", "the port is said first")
}

// gateway token mints a user's bearer token a gateway with the same
// secret accepts; a command waiting for a store says on stderr what it
// waits for, naming the variable, before its deadline.
func TestTokenAndWaitingSayWhatTheyDo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	dir := t.TempDir()
	require.NoError(t, harness.Build(dir, false, "gateway", "reaper"))
	secret := strings.Repeat("k", 32)
	cmd := exec.Command(filepath.Join(dir, "gateway"), "token", "--user", "alice", "--ttl", "10m")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "FLASHSALE_JWT_SECRET=" + secret}
	out, err := cmd.Output()
	require.NoError(t, err)
	user, err := token.New(token.Config{Secret: secret, MaxLifetime: time.Hour}).Verify(strings.TrimSpace(string(out)))
	require.NoError(t, err, "the token verifies with the secret: %s", out)
	require.Equal(t, "alice", user)

	// Many users' tokens in one run, streamed: a user,token line each.
	var in strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&in, "user%d\n", i)
	}
	cmd = exec.Command(filepath.Join(dir, "gateway"), "token", "--users", "-", "--ttl", "10m")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "FLASHSALE_JWT_SECRET=" + secret}
	cmd.Stdin = strings.NewReader(in.String())
	out, err = cmd.Output()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	require.Len(t, lines, 5000)
	for _, i := range []int{0, 4999} {
		u, tok, ok := strings.Cut(lines[i], ",")
		require.True(t, ok, lines[i])
		require.Equal(t, fmt.Sprintf("user%d", i), u)
		got, err := token.New(token.Config{Secret: secret, MaxLifetime: time.Hour}).Verify(tok)
		require.NoError(t, err)
		require.Equal(t, u, got)
	}
	cmd = exec.Command(filepath.Join(dir, "gateway"), "token", "--users", "-")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "FLASHSALE_JWT_SECRET=" + secret}
	cmd.Stdin = strings.NewReader("ann\nnot a user\n")
	var stderrBuf strings.Builder
	cmd.Stderr = &stderrBuf
	out, err = cmd.Output()
	require.Error(t, err)
	require.Equal(t, 2, cmd.ProcessState.ExitCode())
	require.Contains(t, stderrBuf.String(), "line 2:")
	require.True(t, strings.HasPrefix(string(out), "ann,") && strings.Count(string(out), "\n") == 1, "the whole line before the bad one: %q", out)

	cmd = exec.Command(filepath.Join(dir, "reaper"), "reconcile")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "FLASHSALE_REDIS_ADDR=127.0.0.1:1", "FLASHSALE_MYSQL_DSN=root@tcp(127.0.0.1:1)/x"}
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(stderr).ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, line, "waiting: cannot reach Redis at 127.0.0.1:1 (FLASHSALE_REDIS_ADDR)")
	require.NotContains(t, line, "load script")
}

// helpVariables reads the variable table of a binary's help (VARIABLE,
// DEFAULT or "-", MEANING): name -> default. A row without a meaning fails
// t: help reads it from docs/CONFIGURATION.md.
func helpVariables(t *testing.T, help string) map[string]string {
	out := map[string]string{}
	_, table, _ := strings.Cut(help, "\nVARIABLE")
	for _, l := range strings.Split(table, "\n")[1:] {
		f := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(l), 3)
		if len(f) < 2 || !strings.HasPrefix(f[0], "FLASHSALE_") {
			continue
		}
		if len(f) < 3 || f[2] == "" {
			t.Errorf("help gives %s no meaning", f[0])
		}
		out[f[0]] = strings.TrimPrefix(f[1], "-")
	}
	return out
}

// docs/CONFIGURATION.md is the configuration the binaries read: every
// variable a binary's help lists is in its table and every one the table
// names is read; each row's roles are the binaries that read it; a default
// the table writes as a literal is the one the binary has.
func TestTheConfigurationTableIsTheBinariesConfiguration(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	dir := t.TempDir()
	bins := []string{"gateway", "worker", "reaper"}
	require.NoError(t, harness.Build(dir, false, bins...))
	read := map[string]map[string]string{} // binary -> variable -> default
	for _, bin := range bins {
		cmd := exec.Command(filepath.Join(dir, bin), "help", "config")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		out, err := cmd.Output()
		require.NoError(t, err)
		read[bin] = helpVariables(t, string(out))
		require.NotEmpty(t, read[bin], bin)
	}
	root, err := harness.ModuleRoot()
	require.NoError(t, err)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "CONFIGURATION.md"))
	require.NoError(t, err)
	documented := map[string]bool{}
	name := regexp.MustCompile("`(FLASHSALE_[A-Z0-9_]+)`")
	literal := regexp.MustCompile("^`([^`]*)`$")
	for _, row := range strings.Split(string(doc), "\n") {
		cells := strings.Split(row, "|")
		if len(cells) < 5 || !strings.Contains(cells[1], "`FLASHSALE_") {
			continue
		}
		var vars []string
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			vars = append(vars, m[1])
			documented[m[1]] = true
		}
		roles := strings.TrimSpace(cells[2])
		var want []string
		switch {
		case roles == "all" || strings.Contains(roles, "migrate"):
			want = bins
		default:
			for _, b := range bins {
				if strings.Contains(roles, b) {
					want = append(want, b)
				}
			}
		}
		require.NotEmpty(t, want, "%s: roles %q", vars, roles)
		defaults := strings.Split(strings.TrimSpace(cells[3]), ", ")
		for i, v := range vars {
			for _, b := range bins {
				if _, reads := read[b][v]; reads != slices.Contains(want, b) {
					t.Errorf("docs/CONFIGURATION.md says %s is read by %s; %s help says otherwise", v, roles, b)
				}
			}
			if len(defaults) != len(vars) {
				continue
			}
			if m := literal.FindStringSubmatch(defaults[i]); m != nil && !strings.HasPrefix(m[1], "FLASHSALE_") {
				if got := read[want[0]][v]; got != m[1] {
					t.Errorf("docs/CONFIGURATION.md gives %s the default %q; %s has %q", v, m[1], want[0], got)
				}
			}
		}
	}
	for _, b := range bins {
		for v := range read[b] {
			if !documented[v] {
				t.Errorf("%s reads %s, which docs/CONFIGURATION.md does not describe", b, v)
			}
		}
	}
}

// runIn runs binary bin of dir with args and exactly env (and PATH), and
// returns what it wrote to stdout and stderr, and its exit status.
func runIn(t *testing.T, dir string, env []string, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, bin), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), errOut.String(), code
}

// Every flag of every command of every binary is in the docs: in README.md
// or docs/*.md, a paragraph (or table, or code block) names the command
// ("deadletters purge", "gateway token") and the flag ("--older-than").
// The commands and flags are read from the binaries' own help, at every
// depth.
func TestEveryFlagOfEveryCommandIsDocumented(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	dir := t.TempDir()
	bins := []string{"gateway", "worker", "reaper"}
	require.NoError(t, harness.Build(dir, false, bins...))
	root, err := harness.ModuleRoot()
	require.NoError(t, err)
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	var paragraphs []string
	for _, f := range append(files, filepath.Join(root, "README.md")) {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		paragraphs = append(paragraphs, regexp.MustCompile(`\n\s*\n`).Split(string(b), -1)...)
	}
	help := func(args ...string) string {
		cmd := exec.Command(filepath.Join(dir, args[0]), args[1:]...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		out, err := cmd.Output()
		require.NoError(t, err, "%v", args)
		return string(out)
	}
	command := regexp.MustCompile(`^  ([a-z][a-z-]*(?: [a-z][a-z-]*)*)(?: [A-Z_.\[\]]+)*\s{2,}`)
	flagLine := regexp.MustCompile(`(?m)^  (--[a-z-]+)`)
	flags := 0
	for _, bin := range bins {
		text, _, _ := strings.Cut(help(bin, "help"), "This text and the build")
		for _, l := range strings.Split(text, "\n") {
			m := command.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			usage := help(append(append([]string{bin}, strings.Fields(m[1])...), "-h")...)
			for _, f := range flagLine.FindAllStringSubmatch(usage, -1) {
				flags++
				flag := regexp.MustCompile(regexp.QuoteMeta(f[1]) + `\b`)
				if !slices.ContainsFunc(paragraphs, func(p string) bool { return strings.Contains(p, m[1]) && flag.MatchString(p) }) {
					t.Errorf("%s %s %s: no paragraph of the docs names the command and the flag", bin, m[1], f[1])
				}
			}
		}
	}
	require.Greater(t, flags, 15, "the flags read from the binaries' help")
}
