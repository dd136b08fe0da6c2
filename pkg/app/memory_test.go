package app

import (
	"math"
	"testing"

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
	require.NoError(t, Load(&c))
	c.MemoryLimit = 256 // 256 bytes: a unit left out
	require.ErrorContains(t, c.Validate(), "FLASHSALE_MEMORY_LIMIT")
	c.MemoryLimit = 256 << 20
	require.NoError(t, c.Validate())
}
