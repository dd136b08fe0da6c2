package admission

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// admit.lua's header lists the fields of a claim's line, and its parser
// captures them, in the order admitCall.line writes them: the wire
// contract is held in one place on each side, and this test holds the two
// sides together.
func TestTheClaimLineIsTheOneAdmitLuaReads(t *testing.T) {
	raw, err := os.ReadFile("../../../lua/admit.lua")
	require.NoError(t, err)
	src := string(raw)
	require.Contains(t, src, "-- claim line: "+strings.Join(claimLine[:], " ")+"\n",
		"admit.lua's header lists the claim line's fields as admit.go's claimLine does")
	for _, f := range claimLine {
		require.Regexp(t, `(?m)^--   `+f+` +\S`, src, "admit.lua's header says what %s is", f)
	}
	parser := regexp.MustCompile(`local CLAIM_LINE = '(\^[^']*\\n)'`).FindStringSubmatch(src)
	require.NotNil(t, parser, "admit.lua reads each claim line with one anchored pattern, CLAIM_LINE, to its newline")
	require.Equal(t, len(claimLine), strings.Count(parser[1], "("), "the parser captures one value per field")
	vars := regexp.MustCompile(`local _, stop, ([\w, ]+) =\s+string\.find\(lines, CLAIM_LINE, at\)`).FindStringSubmatch(src)
	require.NotNil(t, vars)
	names := strings.Split(vars[1], ", ")
	require.Len(t, names, len(claimLine))
	for k, f := range claimLine {
		lua := strings.ReplaceAll(strings.ToLower(f), "access", "code")
		require.Equal(t, lua, names[k], "field %d: admit.lua's loop variable names %s", k+1, f)
	}
}

// A claim's line leaves out the fields after the last that is not its
// default: the common claim is its user alone.
func TestAClaimLineCarriesOnlyWhatDiffersFromTheDefaults(t *testing.T) {
	now := time.Now()
	today, tomorrow := order.Day(now, time.UTC), order.Day(now.Add(24*time.Hour), time.UTC)
	for _, tc := range []struct {
		c    Claim
		want string
	}{
		{Claim{UserID: "ann", Now: now, Day: today}, "ann\n"},
		{Claim{UserID: "ann", Now: now, Day: today, Quantity: 1}, "ann\n"},
		{Claim{UserID: "ann", Now: now, Day: today, Serial: 0xfa1afe1}, "ann fa1afe1\n"},
		{Claim{UserID: "ann", Now: now, Day: today, Serial: 1<<64 - 1}, "ann ffffffffffffffff\n"},
		{Claim{UserID: "ann", Now: now, Day: today, Serial: 7, IdempotencyKey: "k", IdempotencyTTL: time.Second}, "ann 0 0 1 1 0 0 1 1\n"},
		{Claim{UserID: "bob", Now: now.Add(-3 * time.Millisecond), Day: today}, "bob 0 -3\n"},
		{Claim{UserID: "cid", Now: now, Day: today, Quantity: 4}, "cid 0 0 4\n"},
		{Claim{UserID: "dee", Now: now, Day: tomorrow}, "dee 0 0 1 2\n"},
		{Claim{UserID: "eve", Now: now, Day: today, Access: rdb.AccessCodeInvalid}, "eve 0 0 1 1 2\n"},
		{Claim{UserID: "fay", Now: now, Day: today, Pass: "17:1790000060000"}, "fay 0 0 1 1 0 17:1790000060000\n"},
		{Claim{UserID: "gus", Now: now, Day: today, IdempotencyKey: "k", IdempotencyTTL: time.Hour}, "gus 0 0 1 1 0 0 1 3600\n"},
		{Claim{UserID: "hal", Now: now, Day: today, Proof: rdb.Proof{ID: "sig", Max: 500, TTL: 1500 * time.Millisecond}},
			"hal 0 0 1 1 0 0 0 0 1 500 2\n"},
	} {
		call := &admitCall{keys: &callKeys{name: "flashsale:{p0}:v:1"}, base: now.UnixMilli(), days: []string{today}}
		require.Equal(t, tc.want, string(call.line(nil, tc.c)), "%+v", tc.c)
	}
}
