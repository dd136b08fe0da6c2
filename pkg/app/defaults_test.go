package app_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/reaper"
	"github.com/flashsale/flashsale/pkg/worker"
)

// clearFlashsaleEnv unsets every FLASHSALE_* variable for the test.
func clearFlashsaleEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "FLASHSALE_") {
			t.Setenv(k, "") // restored at cleanup
			require.NoError(t, os.Unsetenv(k))
		}
	}
}

// The defaults written in the envconfig tags (what a binary runs with) are
// the XxxDefault constants (what a library user gets from a zero Config):
// one set of defaults, not two that drift apart.
func TestEnvDefaultsAreTheConstants(t *testing.T) {
	clearFlashsaleEnv(t)

	var w worker.Config
	require.NoError(t, envconfig.Process("", &w))
	var wz worker.Config
	wz.SetDefaults()
	require.Equal(t, wz, w, "worker")

	var r reaper.Config
	require.NoError(t, envconfig.Process("", &r))
	r.SetDefaults() // per-service intervals default to the interval
	var rz reaper.Config
	rz.SetDefaults()
	require.Equal(t, rz, r, "reaper")

	t.Setenv("FLASHSALE_ADMIN_TOKEN", "a")
	t.Setenv("FLASHSALE_JWT_SECRET", "s")
	var g gateway.Config
	require.NoError(t, envconfig.Process("", &g))
	g.SetDefaults() // the IP burst follows the IP rate
	// 0 is a choice for these (no pipelining, no user rate limit, no
	// sold-out pruning), so a zero Config keeps it; the binaries default
	// to on.
	gz := gateway.Config{AdminToken: "a", JWTSecret: "s", PipelineWorkers: g.PipelineWorkers, UserRate: g.UserRate, SoldOutRefresh: g.SoldOutRefresh}
	gz.SetDefaults()
	require.Equal(t, gz, g, "gateway")
	require.Equal(t, 4, g.PipelineWorkers)
	require.Equal(t, 10.0, g.UserRate)
	require.Equal(t, 200*time.Millisecond, g.SoldOutRefresh)
}
