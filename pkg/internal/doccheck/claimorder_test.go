package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The gateway's checks of a claim run in the order claim's comment and
// docs/ARCHITECTURE.md's summary list them (the summary once put the
// access code before the sold-out flag, which the code checks first).
func TestTheClaimsChecksRunInTheListedOrder(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "gateway", "claim.go"))
	require.NoError(t, err)
	src := string(raw)
	start := strings.Index(src, "// claim: POST /v1/vouchers/{id}/orders.")
	body := strings.Index(src, "func (g *Gateway) claim(")
	end := strings.Index(src[body:], "\n}\n")
	require.True(t, start >= 0 && body > start && end > 0, "claim and its comment")
	comment, code := src[start:body], src[body:body+end]
	summary := read(t, "ARCHITECTURE.md")
	from := strings.Index(summary, "In short: the gateway sheds")
	to := strings.Index(summary, "then one call of `lua/admit.lua`")
	require.True(t, from >= 0 && to > from, "ARCHITECTURE.md's summary of the claim's path")
	summary = summary[from:to]
	checks := []struct{ call, comment, summary string }{
		{"g.claimProof(", "claimProof", "proof of work's"},
		{"g.soldOut.Prune(", "soldOut.Prune", "sold-out flag"},
		{"g.claimAccess(", "claimAccess", "access code's"},
		{"g.roomPass(", "roomPass", "waiting room's"},
		{"g.admitClaim(", "admitClaim", ""},
	}
	lastCode, lastComment, lastSummary := -1, -1, -1
	for _, c := range checks {
		i, j := strings.Index(code, c.call), strings.Index(comment, c.comment)
		require.Greater(t, i, lastCode, "claim calls %s after the check listed before it", c.call)
		require.Greater(t, j, lastComment, "claim's comment lists %s in the order the code runs it", c.comment)
		lastCode, lastComment = i, j
		if c.summary != "" {
			k := strings.Index(summary, c.summary)
			require.Greater(t, k, lastSummary, "ARCHITECTURE.md's summary names %q in the order the code runs it", c.summary)
			lastSummary = k
		}
	}
}
