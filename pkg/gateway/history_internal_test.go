package gateway

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The 99th percentile of a second's claims, from the histogram's
// buckets: interpolated within its bucket, as histogram_quantile does.
func TestQuantileOfTheInterval(t *testing.T) {
	n := len(latencyBuckets) + 1
	before := make([]uint64, n)
	after := make([]uint64, n)
	require.Nil(t, quantileMS(0.99, before, after), "no claims, no percentile")

	// 100 claims: 50 under 0.2 ms, 49 in (0.5, 1] ms, 1 in (5, 10] ms.
	fill := func(counts map[int]uint64) {
		var cum uint64
		for i := range latencyBuckets {
			cum += counts[i]
			after[i] = before[i] + cum
		}
		after[n-1] = before[n-1] + cum
	}
	before[0], before[n-1] = 7, 7 // earlier claims are not this interval's
	for i := 1; i < n-1; i++ {
		before[i] = 7
	}
	fill(map[int]uint64{0: 50, 2: 49, 5: 1})
	p99 := quantileMS(0.99, before, after)
	require.NotNil(t, p99)
	require.InDelta(t, 1.0, *p99, 1e-9, "the 99th of 100 is the last of the (0.5, 1] ms bucket")
	p50 := quantileMS(0.5, before, after)
	require.InDelta(t, 0.2, *p50, 1e-9)
	p100 := quantileMS(1, before, after)
	require.InDelta(t, 10.0, *p100, 1e-9)

	// Beyond the last bucket: its bound, not a guess.
	fill(map[int]uint64{})
	after[n-1] = before[n-1] + 3
	require.InDelta(t, 1000.0, *quantileMS(0.99, before, after), 1e-9)
}
