package rdb_test

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/rdb"
)

// A reply code means one thing in every script (15 was "not loaded" in
// admit.lua and "no room" in room.lua): every code a script answers is in
// rdb's table, and admit.lua's are exactly the ones the Go maps to errors
// (and 10, route again, which it handles apart).
func TestEveryScriptsCodesAreTheTables(t *testing.T) {
	for _, f := range []string{"admit.lua", "room.lua", "take.lua", "give.lua", "change.lua", "release.lua", "pending.lua", "ack.lua", "lease.lua", "delconsumer.lua"} {
		src, err := os.ReadFile("../../lua/" + f)
		require.NoError(t, err)
		for _, c := range scriptCodes(string(src)) {
			if f != "admit.lua" && f != "room.lua" {
				continue // answers of their own (counts, 0/1/-1), not refusals
			}
			_, ok := rdb.Codes[c]
			require.True(t, ok, "%s answers %d, which rdb's table of codes does not name", f, c)
		}
	}
	src, err := os.ReadFile("../../lua/admit.lua")
	require.NoError(t, err)
	mapped := slices.Sorted(maps.Keys(rdb.AdmitErrors()))
	mapped = append(mapped, rdb.CodeRouteAgain)
	slices.Sort(mapped)
	require.Equal(t, mapped, scriptCodes(string(src)), "admit.lua's codes and the ones admit.go maps")
}

// Each script's header names each code it answers as "N (name)", the
// name rdb's table gives it: the header is the script's contract, and the
// table is the one meaning.
func TestTheScriptsHeadersNameTheirCodesByTheTable(t *testing.T) {
	for _, f := range []string{"admit.lua", "room.lua"} {
		raw, err := os.ReadFile("../../lua/" + f)
		require.NoError(t, err)
		src := string(raw)
		codes := scriptCodes(src)
		require.NotEmpty(t, codes, f)
		for _, c := range codes {
			want := strconv.FormatInt(c, 10) + " (" + rdb.Codes[c] + ")"
			require.True(t, strings.Contains(strings.Join(strings.Fields(src), " "), want), "%s's header names code %d as %q", f, c, want)
		}
	}
}

// scriptCodes lists the reply codes a script's source answers, from its
// body (comments left out): what it assigns to out[...] or code (every
// number of the assignment, unless it calls a function), and what it
// passes to all(...) or returns as {N, ...}; in ascending order.
func scriptCodes(src string) []int64 {
	seen := map[int64]bool{}
	for _, line := range strings.Split(src, "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		var nums []string
		if m := assigned.FindStringSubmatch(line); m != nil && !strings.Contains(m[1], "(") {
			nums = number.FindAllString(strings.Join(quoted.Split(m[1], -1), " "), -1) // not in 'strings' nor [indexes]
		}
		for _, m := range returned.FindAllStringSubmatch(line, -1) {
			nums = append(nums, m[1])
		}
		for _, s := range nums {
			if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 {
				seen[n] = true
			}
		}
	}
	out := make([]int64, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

var (
	assigned = regexp.MustCompile(`^\s*(?:out\[[a-z.]+\]|code) = (.*)$`)
	returned = regexp.MustCompile(`(?:all\(\{?|return \{)(\d+)`)
	quoted   = regexp.MustCompile(`'[^']*'|\[[^\]]*\]`)
	number   = regexp.MustCompile(`\b\d+\b`)
)
