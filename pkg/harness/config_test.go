package harness_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/harness"
)

// A binary that cannot start says why in one JSON log line and exits 1.
func TestBinariesRefuseBadConfigInOneLine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries")
	}
	dir := t.TempDir()
	require.NoError(t, harness.Build(dir, false, "gateway", "worker"))
	secret := "FLASHSALE_JWT_SECRET=" + strings.Repeat("s", 32)
	tests := []struct {
		name, bin string
		env       []string
		args      []string
		want      string
	}{
		{"no admin token", "gateway", []string{secret}, nil, "FLASHSALE_ADMIN_TOKEN"},
		// Unprefixed variables are never read.
		{"unprefixed admin token", "gateway", []string{secret, "ADMIN_TOKEN=x"}, nil, "FLASHSALE_ADMIN_TOKEN"},
		{"no jwt secret", "gateway", []string{"FLASHSALE_ADMIN_TOKEN=x"}, nil, "FLASHSALE_JWT_SECRET"},
		{"bad log level", "worker", []string{"FLASHSALE_LOG_LEVEL=loud"}, nil, "FLASHSALE_LOG_LEVEL"},
		{"bad duration", "worker", []string{"FLASHSALE_WORKER_BLOCK=soon"}, nil, "FLASHSALE_WORKER_BLOCK"},
		{"unknown command", "worker", []string{"FLASHSALE_REDIS_ADDR=127.0.0.1:1"}, []string{"frobnicate"}, "unknown command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(dir, tt.bin), tt.args...)
			cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, tt.env...)
			out, err := cmd.CombinedOutput()
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
