package app

import (
	"math"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSoftMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name           string
		limit, current int64
		want           int64
	}{
		{"the chart's gateway limit", 256 << 20, math.MaxInt64, 214748364},
		{"no limit known", 0, math.MaxInt64, 0},
		{"GOMEMLIMIT wins", 256 << 20, 100 << 20, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, SoftMemoryLimit(tc.limit, tc.current))
		})
	}
}

func TestMemoryLimitTooSmallIsRefused(t *testing.T) {
	var c Common
	_, err := Load(&c)
	require.NoError(t, err)
	c.MemoryLimit = 256 // 256 bytes: a unit left out
	require.ErrorContains(t, c.Validate(), "FLASHSALE_MEMORY_LIMIT")
	c.MemoryLimit = 256 << 20
	require.NoError(t, c.Validate())
}

// A renamed variable is read under its old name for one release, when
// the new one is not set, and Load says which old name it read.
func TestARenamedVariableIsReadUnderItsOldName(t *testing.T) {
	type cfg struct {
		Idle time.Duration `envconfig:"FLASHSALE_TAKEOVER_MIN_IDLE" default:"30s"`
	}
	t.Setenv("FLASHSALE_CLAIM_MIN_IDLE", "7s")
	var c cfg
	old, err := Load(&c)
	require.NoError(t, err)
	require.Equal(t, 7*time.Second, c.Idle)
	require.Equal(t, []string{"FLASHSALE_CLAIM_MIN_IDLE (now FLASHSALE_TAKEOVER_MIN_IDLE)"}, old)
	_, set := os.LookupEnv("FLASHSALE_TAKEOVER_MIN_IDLE")
	require.False(t, set, "the environment left as it was")

	t.Setenv("FLASHSALE_TAKEOVER_MIN_IDLE", "9s") // the new name wins
	old, err = Load(&c)
	require.NoError(t, err)
	require.Equal(t, 9*time.Second, c.Idle)
	require.Empty(t, old)
}
