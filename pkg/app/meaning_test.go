package app

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// help's meanings are CONFIGURATION.md's, as a terminal shows them: the
// first clause, no markdown, at most meaningWidth and an ellipsis.
func TestHelpReadsTheMeaningsFromTheConfigurationDoc(t *testing.T) {
	m := meanings("| variable | role | default | meaning |\n|---|---|---|---|\n" +
		"| `FLASHSALE_A`, `FLASHSALE_B` | all | `1` | the [`a`](x.md) and *b*; more |\n" +
		"| `FLASHSALE_C` | all | `1` | " + strings.Repeat("word ", 40) + "|\n")
	require.Equal(t, "the a and b", m["FLASHSALE_A"])
	require.Equal(t, m["FLASHSALE_A"], m["FLASHSALE_B"])
	require.LessOrEqual(t, len(m["FLASHSALE_C"]), meaningWidth+len(" …"))
	require.True(t, strings.HasSuffix(m["FLASHSALE_C"], " …"))

	require.Greater(t, len(variableMeanings), 50, "the embedded doc's table was read")
	for v, s := range variableMeanings {
		require.NotEmpty(t, s, v)
		require.NotContains(t, s, "`", v)
	}
}

// Each variable has a meaning of its own in help: a row naming several
// variables gave each the whole row's sentence (the sentinel's password
// was "the master's name at the sentinels").
func TestEachVariableHasItsOwnMeaning(t *testing.T) {
	byMeaning := map[string][]string{}
	for v, m := range variableMeanings {
		byMeaning[m] = append(byMeaning[m], v)
	}
	for m, vs := range byMeaning {
		require.Len(t, vs, 1, "%v share the meaning %q: give each a row of its own in docs/CONFIGURATION.md", vs, m)
	}
	require.Contains(t, variableMeanings["FLASHSALE_REDIS_SENTINEL_PASSWORD"], "password")
}
