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

// A value that cannot be read is named with its variable and what it
// wants, in the manual's words: not envconfig's Go field and type.
func TestABadValueIsNamedInPlainWords(t *testing.T) {
	type cfg struct {
		Timeout time.Duration `envconfig:"FLASHSALE_REDIS_TIMEOUT" default:"1s"`
		Conns   int           `envconfig:"FLASHSALE_MYSQL_MAX_CONNS" default:"8"`
		Rate    float64       `envconfig:"FLASHSALE_USER_RATE" default:"10"`
		On      bool          `envconfig:"FLASHSALE_TRACING" default:"false"`
	}
	for _, tc := range []struct{ name, value, want string }{
		{"FLASHSALE_REDIS_TIMEOUT", "abc", `FLASHSALE_REDIS_TIMEOUT="abc": want a duration such as 500ms, 2s or 1m`},
		{"FLASHSALE_MYSQL_MAX_CONNS", "8.5", `FLASHSALE_MYSQL_MAX_CONNS="8.5": want a whole number`},
		{"FLASHSALE_USER_RATE", "fast", `FLASHSALE_USER_RATE="fast": want a number such as 0.5`},
		{"FLASHSALE_TRACING", "yes please", `FLASHSALE_TRACING="yes please": want true or false`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.name, tc.value)
			var c cfg
			_, err := Load(&c)
			require.EqualError(t, err, tc.want)
		})
	}
}
