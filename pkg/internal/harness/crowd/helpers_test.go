package crowd_test

import (
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/harness"
)

// runChaos runs the chaos sale of cfg for CHAOS_DURATION (make chaos; 12 s
// by default, as make test runs it), logs its faults and report, writes
// them to CHAOS_REPORT when set, and requires every invariant to hold.
func runChaos(t *testing.T, cfg harness.ChaosConfig) *harness.ChaosReport {
	t.Helper()
	if testing.Short() {
		t.Skip("chaos: builds and runs the binaries under faults")
	}
	cfg.Duration = 12 * time.Second
	if s := os.Getenv("CHAOS_DURATION"); s != "" {
		var err error
		cfg.Duration, err = time.ParseDuration(s)
		require.NoError(t, err)
	}
	// The envelope sale must outlast the run, so that some envelopes are
	// left to refund: more than its side's claims can take.
	cfg.Envelopes = max(cfg.Envelopes, int64(float64(cfg.SideRate)*cfg.Duration.Seconds()*3/2))
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+5*time.Minute)
	defer cancel()
	var log strings.Builder
	cfg.Dir, cfg.Log = t.TempDir(), &log
	t.Cleanup(func() { keepLogsIfFailed(t, cfg.Dir) }) // runs before the directory's removal
	report, err := harness.RunChaos(ctx, cfg)
	t.Log("\n" + log.String())
	require.NoError(t, err)
	var out strings.Builder
	report.Print(&out)
	t.Log("\n" + out.String())
	if os.Getenv("CHAOS_REPORT") != "" {
		require.NoError(t, os.WriteFile(os.Getenv("CHAOS_REPORT"), []byte(log.String()+"\n"+out.String()), 0o644))
	}
	require.Empty(t, report.Violations())
	require.Positive(t, report.Sale.Admitted)
	require.Positive(t, report.Final["paid"])
	require.Len(t, report.Side, 2)
	return report
}

// keepLogsIfFailed copies the logs under dir (the binaries', each
// redis-server's and mariadbd's) to a directory of their own that
// outlives the test, when it failed: a run that fails once in many, on a
// loaded machine, is read from what its processes wrote, and t.TempDir
// removes them.
func keepLogsIfFailed(t *testing.T, dir string) {
	if !t.Failed() {
		return
	}
	keep, err := os.MkdirTemp("", "flashsale-logs-"+strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())+"-")
	if err != nil {
		t.Logf("keeping the logs: %v", err)
		return
	}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".log") {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		to := filepath.Join(keep, rel)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		return copyFile(path, to)
	})
	if err != nil {
		t.Logf("keeping the logs: %v", err)
	}
	t.Logf("the run's logs are kept in %s", keep)
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
