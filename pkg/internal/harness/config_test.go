package harness_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/harness"
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
		{"malformed dsn", "worker", []string{"FLASHSALE_MYSQL_DSN=root:secret@tcp(db:3306"}, nil, "FLASHSALE_MYSQL_DSN"},
		{"bad redis addr", "reaper", []string{"FLASHSALE_REDIS_ADDR=redis"}, nil, "FLASHSALE_REDIS_ADDR"},
		{"negative batch", "worker", []string{"FLASHSALE_WORKER_BATCH_SIZE=-5"}, nil, "FLASHSALE_WORKER_BATCH_SIZE"},
		{"negative backoff", "worker", []string{"FLASHSALE_WORKER_RETRY_BACKOFF=-1s"}, nil, "FLASHSALE_WORKER_RETRY_BACKOFF"},
		{"negative redis timeout", "worker", []string{"FLASHSALE_REDIS_TIMEOUT=-1s"}, nil, "FLASHSALE_REDIS_TIMEOUT"},
		{"zero max conns", "reaper", []string{"FLASHSALE_MYSQL_MAX_CONNS=-1"}, nil, "FLASHSALE_MYSQL_MAX_CONNS"},
		{"block over a third of min idle", "worker", []string{"FLASHSALE_WORKER_BLOCK=5s", "FLASHSALE_CLAIM_MIN_IDLE=6s"}, nil, "FLASHSALE_WORKER_BLOCK"},
		{"zero max deliveries", "reaper", []string{"FLASHSALE_MAX_DELIVERIES=-1"}, nil, "FLASHSALE_MAX_DELIVERIES"},
		{"negative reaper interval", "reaper", []string{"FLASHSALE_REAPER_INTERVAL=-5s"}, nil, "FLASHSALE_REAPER_INTERVAL"},
		{"short jwt secret", "gateway", []string{admin, "FLASHSALE_JWT_SECRET=short"}, nil, "FLASHSALE_JWT_SECRET"},
		{"bad time zone", "gateway", []string{secret, admin, "FLASHSALE_TIMEZONE=Mars/Olympus"}, nil, "FLASHSALE_TIMEZONE"},
		{"negative claim timeout", "gateway", []string{secret, admin, "FLASHSALE_CLAIM_TIMEOUT=-1s"}, nil, "FLASHSALE_CLAIM_TIMEOUT"},
		{"zero mysql inflight", "gateway", []string{secret, admin, "FLASHSALE_MYSQL_MAX_INFLIGHT=-2"}, nil, "FLASHSALE_MYSQL_MAX_INFLIGHT"},
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
		cmd := exec.Command(filepath.Join(dir, bin), "help")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s help: %s", bin, out)
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

// The commands a person types (issue 23): -h on each answers its usage on
// stdout and exits 0 with no secret and no server; a mistyped command or
// subcommand is said in plain text before anything is dialled, exit 2; a
// command that fails says so in plain text, exit 2.
func TestCommandsAnswerHelpAndSayWhatFailed(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	dir := t.TempDir()
	require.NoError(t, harness.Build(dir, false, "gateway", "reaper"))
	run := func(env []string, bin string, args ...string) (stdout, stderr string, code int) {
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
	for _, c := range [][]string{{"reaper", "reconcile", "-h"}, {"reaper", "deadletters", "--help"}, {"reaper", "deadletters", "purge", "-h"}, {"reaper", "report", "-h"}, {"reaper", "draw", "-h"}, {"gateway", "smoke", "--help"}} {
		out, errOut, code := run(nil, c[0], c[1:]...)
		require.Zero(t, code, "%v: %s", c, errOut)
		require.Contains(t, out, "usage: "+c[0]+" "+c[1], "%v", c)
		require.Empty(t, errOut, "%v", c)
	}
	out, _, code := run(nil, "reaper", "help")
	require.Zero(t, code)
	require.Contains(t, out, "reconcile [--repair] [--json]")
	require.Contains(t, out, "exit 0 when they agree, 1 when they differ, 2 when it failed")
	require.Contains(t, out, "deadletters [list|requeue|purge]")

	out, errOut, code := run(nil, "reaper", "recocile")
	require.Equal(t, 2, code)
	require.Empty(t, out)
	require.Contains(t, errOut, `unknown command "recocile"`)

	// A server that is not there: the subcommand is judged first; a
	// failure is one plain line.
	closed := []string{"FLASHSALE_REDIS_ADDR=127.0.0.1:1", "FLASHSALE_MYSQL_DSN=root@tcp(127.0.0.1:1)/x", "FLASHSALE_REDIS_TIMEOUT=200ms"}
	_, errOut, code = run(closed, "reaper", "deadletters", "frobnicate")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown deadletters command "frobnicate"`)
	require.NotContains(t, errOut, "connect")
	for args, want := range map[string]string{"": "report needs one VOUCHER_ID", "x": "VOUCHER_ID must be a positive whole number", "1 2": "report needs one VOUCHER_ID"} {
		_, errOut, code = run(closed, "reaper", append([]string{"report"}, strings.Fields(args)...)...)
		require.Equal(t, 2, code, "report %s: %s", args, errOut)
		require.Contains(t, errOut, want)
		require.NotContains(t, errOut, "connect")
	}
	for args, want := range map[string]string{"": "usage: draw verify VOUCHER_ID", "check 1": "usage: draw verify VOUCHER_ID",
		"verify": "draw verify needs one VOUCHER_ID", "verify x": "VOUCHER_ID must be a positive whole number"} {
		_, errOut, code = run(closed, "reaper", append([]string{"draw"}, strings.Fields(args)...)...)
		require.Equal(t, 2, code, "draw %s: %s", args, errOut)
		require.Contains(t, errOut, want)
		require.NotContains(t, errOut, "connect")
	}
	_, errOut, code = run(closed, "reaper", "reconcile", "--bogus")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "reaper reconcile: flag provided but not defined: -bogus", "plain text, not a JSON line")
	require.NotContains(t, errOut, `"level"`)
	_, errOut, code = run([]string{"FLASHSALE_STREAM_PARTITIONS=0"}, "reaper", "reconcile")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "FLASHSALE_STREAM_PARTITIONS")
	require.False(t, strings.HasPrefix(errOut, "{"), "plain text: %s", errOut)
}
