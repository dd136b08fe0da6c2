package gateway

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// The console draws each claim outcome in a colour of its own: every
// outcome a claim can be counted under has one, and no two share it
// (access_required was drawn in admitted's green, not_admitted in
// invalid's orange).
func TestEveryClaimOutcomeHasItsOwnColour(t *testing.T) {
	consoleHTML, err := os.ReadFile(filepath.Join("operator", "console.html"))
	require.NoError(t, err)
	m := regexp.MustCompile(`const OUTCOME_COLORS = (\{[^}]*\});`).FindSubmatch(consoleHTML)
	require.NotNil(t, m, "console.html's OUTCOME_COLORS")
	var colors map[string]string
	require.NoError(t, json.Unmarshal(m[1], &colors))
	outcomes := []string{resultAdmitted, resultEntered, resultReplayed, resultInvalid, resultUnavailable}
	for _, e := range errorTable {
		if e.api.Status < 500 {
			outcomes = append(outcomes, resultRejected+":"+e.api.Code)
		}
	}
	for _, o := range outcomes {
		require.Contains(t, colors, o, "console.html's OUTCOME_COLORS has no colour for %s", o)
	}
	by := map[string]string{}
	for o, c := range colors {
		require.Empty(t, by[c], "%s and %s share %s", o, by[c], c)
		by[c] = o
	}
}
