// Package history keeps the short history that the operator's console
// charts: every sample, a replica's claims per second by outcome and their
// 99th percentile (read from the Prometheus counters and histogram it keeps
// anyway), and, while someone watches, each active voucher's remaining
// stock in Redis and each partition's stream backlog.
//
// The stores are read only while the history is watched (Watch after the
// last Read), so a replica nobody watches asks them nothing; a claim pays
// nothing for any of it.
package history

import (
	"context"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/rdb"
)

const (
	// Length is the number of points kept: ten minutes of one a second.
	Length = 600
	// Watch is how long after the last Read the stores are still sampled.
	Watch = 10 * time.Minute
	// Vouchers is how many of the newest active vouchers are charted.
	Vouchers = 20
)

// Point is one sample.
type Point struct {
	At time.Time `json:"at"`
	// Claims: claims per second since the previous sample, by outcome
	// ("admitted", "rejected:sold_out", ...); P99MS their 99th percentile
	// answer time (nil when there were none). This replica only.
	Claims map[string]float64 `json:"claims_per_second"`
	P99MS  *float64           `json:"p99_ms"`
	// Stock (remaining in Redis, by voucher id) and Backlog (stream
	// entries not yet persisted, by partition) are the stores' and the
	// same for every replica; absent while nobody watched.
	Stock   map[string]int64 `json:"stock,omitempty"`
	Backlog map[string]int64 `json:"backlog,omitempty"`
}

// Source is what a Sampler reads.
type Source struct {
	// Claims is the cumulative count of claims by outcome (Totals).
	Claims func() map[string]int64
	// Latency is the cumulative count of claims under each of Bounds,
	// then the total (Buckets).
	Latency func() []uint64
	Bounds  []float64
	// Redis and DB give the stock and backlog; either nil leaves them out.
	Redis *rdb.Store
	DB    *db.Store
	Log   *zap.Logger
}

// Sampler keeps the last Length points. Sample is called by one goroutine
// at a time; Read and Watch by any.
type Sampler struct {
	src     Source
	watched atomic.Int64 // UnixNano of the last Read

	mu     sync.Mutex
	points []Point // oldest first, at most Length
	names  map[string]string
	// the previous sample's counters, for the next one's rates
	lastAt      time.Time
	lastClaims  map[string]int64
	lastBuckets []uint64
}

// New returns a Sampler of src; it samples when Sample is called.
func New(src Source) *Sampler {
	if src.Log == nil {
		src.Log = zap.NewNop()
	}
	return &Sampler{src: src}
}

// Read returns the points, oldest first, and the charted vouchers' names
// by id, and makes the next samples read the stores.
func (s *Sampler) Read() ([]Point, map[string]string) {
	s.watched.Store(time.Now().UnixNano())
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make(map[string]string, len(s.names))
	for k, v := range s.names {
		names[k] = v
	}
	return append(make([]Point, 0, len(s.points)), s.points...), names
}

// Sample takes one point at now.
func (s *Sampler) Sample(now time.Time) {
	claims := s.src.Claims()
	buckets := s.src.Latency()
	p := Point{At: now.UTC()}
	if time.Since(time.Unix(0, s.watched.Load())) < Watch {
		s.sampleStores(&p)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.lastAt.IsZero() {
		secs := now.Sub(s.lastAt).Seconds()
		p.Claims = map[string]float64{}
		for k, n := range claims {
			if d := n - s.lastClaims[k]; d > 0 {
				p.Claims[k] = math.Round(float64(d)/secs*10) / 10
			}
		}
		p.P99MS = QuantileMS(0.99, s.src.Bounds, s.lastBuckets, buckets)
	}
	s.lastAt, s.lastClaims, s.lastBuckets = now, claims, buckets
	if p.Claims == nil {
		return // the first sample only sets the counters
	}
	if len(s.points) == Length {
		copy(s.points, s.points[1:])
		s.points = s.points[:Length-1]
	}
	s.points = append(s.points, p)
}

// sampleStores reads the active vouchers' stock and the partitions'
// backlog into p (within one second; what fails is left out).
func (s *Sampler) sampleStores(p *Point) {
	if s.src.Redis == nil || s.src.DB == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	vs, err := s.src.DB.ActiveVouchers(ctx, time.Now(), 0)
	if err != nil {
		s.src.Log.Debug("console history: vouchers", zap.Error(err))
		return
	}
	if len(vs) > Vouchers {
		vs = vs[len(vs)-Vouchers:]
	}
	names := make(map[string]string, len(vs))
	p.Stock = make(map[string]int64, len(vs))
	for _, v := range vs {
		id := strconv.FormatInt(v.ID, 10)
		names[id] = v.Name
		if n, found, err := s.src.Redis.RemainingStock(ctx, v.ID); err == nil && found {
			p.Stock[id] = n
		}
	}
	p.Backlog = make(map[string]int64, s.src.Redis.Partitions())
	for part := range s.src.Redis.Partitions() {
		if b, err := s.src.Redis.PartitionBacklog(ctx, part); err == nil {
			p.Backlog[strconv.Itoa(part)] = b.Orders
		}
	}
	s.mu.Lock()
	s.names = names
	s.mu.Unlock()
}

// collect gathers what c reports.
func collect(c prometheus.Collector) []*dto.Metric {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	var out []*dto.Metric
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) == nil {
			out = append(out, &d)
		}
	}
	return out
}

// Totals reads a counter vector labelled by "result" and "reason" into
// counts by result, "<result>:<reason>" where a reason is set; zeros are
// left out.
func Totals(c prometheus.Collector) map[string]int64 {
	out := map[string]int64{}
	for _, d := range collect(c) {
		var result, reason string
		for _, l := range d.GetLabel() {
			switch l.GetName() {
			case "result":
				result = l.GetValue()
			case "reason":
				reason = l.GetValue()
			}
		}
		key := result
		if reason != "" {
			key += ":" + reason
		}
		if n := int64(d.GetCounter().GetValue()); n > 0 {
			out[key] += n
		}
	}
	return out
}

// Buckets reads a histogram (vector), every label summed: the cumulative
// count under each of bounds (the histogram's own buckets), then the total.
func Buckets(c prometheus.Collector, bounds []float64) []uint64 {
	out := make([]uint64, len(bounds)+1)
	for _, d := range collect(c) {
		h := d.GetHistogram()
		if h == nil {
			continue
		}
		for i, b := range h.GetBucket() {
			if i < len(bounds) {
				out[i] += b.GetCumulativeCount()
			}
		}
		out[len(bounds)] += h.GetSampleCount()
	}
	return out
}

// QuantileMS is the q-quantile, in milliseconds, of the observations made
// between two readings of Buckets over bounds, interpolated linearly
// within its bucket as Prometheus's histogram_quantile does; nil if there
// were none. Beyond the last bucket it is the last bucket's bound.
func QuantileMS(q float64, bounds []float64, before, after []uint64) *float64 {
	if len(bounds) == 0 || len(before) != len(after) || len(after) != len(bounds)+1 {
		return nil
	}
	delta := func(i int) float64 { return float64(after[i] - before[i]) }
	total := delta(len(after) - 1)
	if total == 0 {
		return nil
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for i, upper := range bounds {
		c := delta(i)
		if c >= rank {
			v := lower + (upper-lower)*(rank-below)/math.Max(c-below, 1e-9)
			ms := math.Round(v*1e6) / 1e3
			return &ms
		}
		lower, below = upper, c
	}
	ms := bounds[len(bounds)-1] * 1e3
	return &ms
}
