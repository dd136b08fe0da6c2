package app

import (
	"context"
	"flag"
	"testing"

	"github.com/stretchr/testify/require"
)

// A negative number is an argument, never a flag: `reaper top-up 10 -5`
// answered "flag provided but not defined: -5", and the command never
// said what it wants. Flags still go before or after the arguments.
func TestANegativeNumberIsAnArgument(t *testing.T) {
	var dry bool
	cmds := []Command[struct{}]{{Name: "top-up", Args: "VOUCHER_ID UNITS", NArgs: 2,
		Flags: func(fs *flag.FlagSet) { fs.BoolVar(&dry, "dry-run", false, "") },
		Run:   func(context.Context, struct{}, *Runtime, []string) error { return nil }}}
	for _, tc := range []struct{ args, want []string }{
		{[]string{"top-up", "10", "-5"}, []string{"10", "-5"}},
		{[]string{"top-up", "--dry-run", "10", "-5"}, []string{"10", "-5"}},
		{[]string{"top-up", "10", "-5", "--dry-run"}, []string{"10", "-5"}},
		{[]string{"top-up", "-1", "-0.5"}, []string{"-1", "-0.5"}},
	} {
		got, help, err := resolve(cmds, tc.args)
		require.NoError(t, err, "%q", tc.args)
		require.False(t, help)
		require.Equal(t, tc.want, got.args, "%q", tc.args)
	}
	_, _, err := resolve(cmds, []string{"top-up", "10", "5", "-x"})
	require.ErrorContains(t, err, "flag provided but not defined: -x", "a flag that is not one is still refused")
}
