package app_test

import (
	"os"
	"strings"
	"testing"

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
	g.ZeroIsOff()
	g.SetDefaults() // the IP burst follows the IP rate
	gz := gateway.Config{AdminToken: "a", JWTSecret: "s"}
	gz.SetDefaults()
	require.Equal(t, gz, g, "gateway")
	require.Equal(t, gateway.PipelineWorkersDefault, g.PipelineWorkers)
	require.Equal(t, gateway.UserRateDefault, g.UserRate)
	require.Equal(t, gateway.SoldOutRefreshDefault, g.SoldOutRefresh)

	// In the environment 0 turns these off; in a Config, a negative value.
	t.Setenv("FLASHSALE_REDIS_PIPELINE_WORKERS", "0")
	t.Setenv("FLASHSALE_USER_RATE", "0")
	t.Setenv("FLASHSALE_SOLD_OUT_REFRESH", "0")
	var off gateway.Config
	require.NoError(t, envconfig.Process("", &off))
	off.ZeroIsOff()
	off.SetDefaults()
	off.AdminToken, off.JWTSecret = strings.Repeat("a", 32), strings.Repeat("s", 32)
	require.Negative(t, off.PipelineWorkers)
	require.Negative(t, off.UserRate)
	require.Negative(t, off.SoldOutRefresh)
	require.NoError(t, off.Validate())

	// A negative value is refused at start, the variable named.
	t.Setenv("FLASHSALE_USER_RATE", "-1")
	var neg gateway.Config
	require.NoError(t, envconfig.Process("", &neg))
	neg.ZeroIsOff()
	neg.SetDefaults()
	neg.AdminToken, neg.JWTSecret = off.AdminToken, off.JWTSecret
	require.ErrorContains(t, neg.Validate(), "FLASHSALE_USER_RATE must be 0 (off) or a positive rate, got -1")
}
