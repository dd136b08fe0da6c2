package doccheck

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docs/ARCHITECTURE.md is the map, under 400 lines: a part's design is
// its package's doc, beside its code (it had grown to 799 lines of every
// part told in full, far from the code it drifted from).
func TestArchitectureIsAMap(t *testing.T) {
	lines := strings.Count(read(t, "ARCHITECTURE.md"), "\n")
	t.Logf("docs/ARCHITECTURE.md: %d lines", lines)
	require.Less(t, lines, 400, "docs/ARCHITECTURE.md's lines: tell a part's design in its package's doc")
}
