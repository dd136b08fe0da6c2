package history_test

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/history"
)

var latencyBuckets = []float64{.0002, .0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1}

func quantileMS(q float64, before, after []uint64) *float64 {
	return history.QuantileMS(q, latencyBuckets, before, after)
}

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

// A sample is the rates since the previous one; the first only sets the
// counters, and no more than history.Length points are kept.
func TestSamplesAreRatesSinceThePreviousSample(t *testing.T) {
	claims := map[string]int64{}
	buckets := make([]uint64, len(latencyBuckets)+1)
	s := history.New(history.Source{
		Claims:  func() map[string]int64 { return maps.Clone(claims) },
		Latency: func() []uint64 { return slices.Clone(buckets) },
		Bounds:  latencyBuckets,
	})
	at := time.Unix(1_000_000, 0)
	s.Sample(at)
	points, _ := s.Read()
	require.Empty(t, points, "the first sample only sets the counters")

	claims["admitted"], claims["rejected:sold_out"] = 30, 10
	for i := range buckets {
		buckets[i] = 40 // every claim under 0.2 ms
	}
	s.Sample(at.Add(2 * time.Second))
	points, names := s.Read()
	require.Len(t, points, 1)
	require.Empty(t, names, "no stores, no vouchers")
	require.Equal(t, map[string]float64{"admitted": 15, "rejected:sold_out": 5}, points[0].Claims)
	require.NotNil(t, points[0].P99MS)
	require.LessOrEqual(t, *points[0].P99MS, 0.2)
	require.Nil(t, points[0].Stock, "no stores, no stock")

	for i := range history.Length + 5 {
		s.Sample(at.Add(time.Duration(3+i) * time.Second))
	}
	points, _ = s.Read()
	require.Len(t, points, history.Length)
	require.Equal(t, at.Add(time.Duration(3+history.Length+4)*time.Second).UTC(), points[len(points)-1].At)
	require.Empty(t, points[len(points)-1].Claims, "nothing happened: no rates")
	require.Nil(t, points[len(points)-1].P99MS, "no claims, no percentile")
}
