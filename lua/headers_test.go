package lua

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Each script's header (the comment it starts with) is its contract: it
// names exactly the KEYS[i] and ARGV[i] the body reads, no more and no
// fewer, so the header cannot drift from the code again. A body that
// reads a table by a variable (for i = 1, 4 do ... KEYS[i]) may be
// named in its header entry by entry.
func TestScriptHeadersNameWhatTheBodyReads(t *testing.T) {
	files, err := filepath.Glob("*.lua")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	ref := regexp.MustCompile(`\b(KEYS|ARGV)\[(\d+)\]`)
	refs := func(text string) []string {
		var out []string
		for _, m := range ref.FindAllStringSubmatch(text, -1) {
			if r := m[1] + "[" + m[2] + "]"; !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
		slices.Sort(out)
		return out
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		var header, body strings.Builder
		inHeader := true
		for _, line := range strings.Split(string(raw), "\n") {
			trimmed := strings.TrimSpace(line)
			if inHeader && (strings.HasPrefix(trimmed, "--") || trimmed == "") {
				header.WriteString(line + "\n")
				continue
			}
			inHeader = false
			if i := strings.Index(line, "--"); i >= 0 {
				line = line[:i] // a comment in the body is not a read
			}
			body.WriteString(line + "\n")
		}
		require.True(t, strings.HasPrefix(string(raw), "-- "+f+": "), "%s starts with its name and what it does", f)
		have, want := refs(header.String()), refs(body.String())
		for _, r := range want {
			if !slices.Contains(have, r) {
				t.Errorf("%s reads %s, which its header does not name", f, r)
			}
		}
		for _, r := range have {
			table := r[:4]
			byVar := regexp.MustCompile(`\b` + table + `\[[a-z_]\w*\]`).MatchString(body.String())
			if !slices.Contains(want, r) && !byVar {
				t.Errorf("%s's header names %s, which its body never reads", f, r)
			}
		}
	}
}
