package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docs/ARCHITECTURE.md lists the admission script's checks in the order
// lua/admit.lua makes them: each check's words in the text, and the
// place in the script where its rejection (or its replay) is decided.
func TestTheArchitectureListsTheScriptsChecksInOrder(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	require.NoError(t, err)
	script, err := os.ReadFile(filepath.Join(root, "lua", "admit.lua"))
	require.NoError(t, err)
	text := string(doc)
	start := strings.Index(text, "The script, for the call,")
	end := strings.Index(text, "takes the units and counts them")
	require.True(t, start >= 0 && end > start, "ARCHITECTURE.md's list of the script's checks")
	list := text[start:end]
	code := string(script)
	body := strings.Index(code, "local v = redis.call('HMGET'") // the checks come after the header's comments
	require.Positive(t, body)
	checks := []struct{ doc, lua string }{
		{"voucher exists", "return all(1)"},
		{"not paused", "return all(9)"},
		{"idempotency key", "replay[idem] then"},
		{"sale window", "out[i] = 2\n"},
		{"access code", "and 17 or 16\n"},
		{"waiting room's pass", "out[i] = 14\n"},
		{"proof of work", "out[i] = 12\n"},
		{"quantity", "out[i] = 8\n"},
		{"remaining stock", "out[i] = 4\n"},
		{"user's total count", "out[i] = 5\n"},
		{"today's count", "out[i] = 6\n"},
	}
	lastDoc, lastLua := -1, -1
	for _, c := range checks {
		d := strings.Index(list, c.doc)
		l := strings.Index(code[body:], c.lua)
		require.GreaterOrEqual(t, d, 0, "ARCHITECTURE.md's list names %q", c.doc)
		require.GreaterOrEqual(t, l, 0, "admit.lua decides %q at %q", c.doc, c.lua)
		require.Greater(t, d, lastDoc, "ARCHITECTURE.md lists %q out of order", c.doc)
		require.Greater(t, l, lastLua, "admit.lua makes %q out of the order this test knows: update both", c.doc)
		lastDoc, lastLua = d, l
	}
}
