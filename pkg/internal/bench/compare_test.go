package bench

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// The comparison flags a row more than 10 % worse, whichever way worse is
// for it, and only rows both runs have.
func TestCompareFlagsRegressions(t *testing.T) {
	base := &Report{
		CPU:     []CPUMeasure{{Name: "gateway claims, admitted", ProcessUs: 30, VsBare: 2, RedisUs: 10}, {Name: "gone", ProcessUs: 1}},
		Gateway: []Measure{{Name: "gateway claims", Conns: 64, Mode: "closed", RPS: 10000}},
		Drain:   []Drain{{Name: "batched", Workers: 2, BatchSize: 100, PerSecond: 30000}},
	}
	run := &Report{
		CPU:     []CPUMeasure{{Name: "gateway claims, admitted", ProcessUs: 34, VsBare: 2.1, RedisUs: 8}},
		Gateway: []Measure{{Name: "gateway claims", Conns: 64, Mode: "closed", RPS: 8500}},
		Drain:   []Drain{{Name: "batched", Workers: 2, BatchSize: 100, PerSecond: 29000}},
	}
	changes := Compare(base, run)
	worse := map[string]bool{}
	for _, c := range changes {
		worse[c.Row+" "+c.Metric] = c.Worse
	}
	require.Equal(t, map[string]bool{
		"gateway claims, admitted server µs/req":  true,  // +13 %
		"gateway claims, admitted × bare handler": false, // +5 %
		"gateway claims, admitted redis µs/req":   false, // better
		"gateway claims, 64 conns per second":     true,  // -15 %
		"drain, batched, 2 workers orders/s":      false, // -3 %
	}, worse)
	var out bytes.Buffer
	require.Equal(t, 2, PrintChanges(&out, "docs/x.json", base, changes))
	require.Contains(t, out.String(), "WORSE by more than 10 %")
}
