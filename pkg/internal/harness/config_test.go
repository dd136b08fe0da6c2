package harness_test

import (
	"encoding/json"
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
		{"unknown command", "worker", []string{"FLASHSALE_REDIS_ADDR=127.0.0.1:1"}, []string{"frobnicate"}, "unknown command"},
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
