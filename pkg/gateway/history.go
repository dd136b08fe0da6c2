package gateway

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
)

// The console's charts read a short history that the gateway keeps of
// itself: every historyEvery, this replica's claims per second by outcome
// and their 99th percentile (from the counters and histogram it keeps
// anyway), and, while someone watches the console, each active voucher's
// remaining stock in Redis and each partition's stream backlog. The
// stores are read only while the console is open (historyWatch after the
// last read of GET /admin/v1/history), so a gateway nobody watches asks
// them nothing; the claim path pays nothing for any of it.
const (
	historyEvery    = time.Second
	historyLength   = 600 // ten minutes
	historyWatch    = 10 * time.Minute
	historyVouchers = 20 // the newest active vouchers are charted
)

// historyPoint is one sample.
type historyPoint struct {
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

type history struct {
	mu     sync.Mutex
	points []historyPoint // oldest first, at most historyLength
	names  map[string]string
	// last counters, for the next sample's rates
	lastAt      time.Time
	lastClaims  map[string]int64
	lastBuckets []uint64 // cumulative counts of the claim duration buckets
	watched     atomic.Int64
}

// historyJSON is GET /admin/v1/history.
type historyJSON struct {
	Replica         string            `json:"replica"`
	Since           time.Time         `json:"since"`
	IntervalSeconds float64           `json:"interval_seconds"`
	Vouchers        map[string]string `json:"vouchers"` // id → name, of those charted
	Points          []historyPoint    `json:"points"`
}

// getHistory: GET /admin/v1/history.
func (g *Gateway) getHistory(w http.ResponseWriter, r *http.Request) {
	if !g.admin(w, r) {
		return
	}
	g.history.watched.Store(time.Now().UnixNano())
	h := &g.history
	h.mu.Lock()
	out := historyJSON{Replica: g.replica, Since: g.refused.since.UTC(), IntervalSeconds: historyEvery.Seconds(),
		Vouchers: make(map[string]string, len(h.names)), Points: append(make([]historyPoint, 0, len(h.points)), h.points...)}
	for k, v := range h.names {
		out.Vouchers[k] = v
	}
	h.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// sampleHistory samples every historyEvery until stop is called.
func (g *Gateway) sampleHistory(d time.Duration) (stop func()) {
	return every(d, func() { g.sample(time.Now()) })
}

// sample takes one point.
func (g *Gateway) sample(now time.Time) {
	claims := g.claimTotals()
	buckets := g.claimBuckets()
	p := historyPoint{At: now.UTC()}
	if time.Since(time.Unix(0, g.history.watched.Load())) < historyWatch {
		g.sampleStores(&p)
	}
	h := &g.history
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.lastAt.IsZero() {
		secs := now.Sub(h.lastAt).Seconds()
		p.Claims = map[string]float64{}
		for k, n := range claims {
			if d := n - h.lastClaims[k]; d > 0 {
				p.Claims[k] = math.Round(float64(d)/secs*10) / 10
			}
		}
		p.P99MS = quantileMS(0.99, h.lastBuckets, buckets)
	}
	h.lastAt, h.lastClaims, h.lastBuckets = now, claims, buckets
	if p.Claims == nil {
		return // the first sample only sets the counters
	}
	if len(h.points) == historyLength {
		copy(h.points, h.points[1:])
		h.points = h.points[:historyLength-1]
	}
	h.points = append(h.points, p)
}

// sampleStores reads the active vouchers' stock and the partitions'
// backlog into p (within one second; what fails is left out).
func (g *Gateway) sampleStores(p *historyPoint) {
	if g.redis == nil || g.db == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	vs, err := g.db.ActiveVouchers(ctx, time.Now(), 0)
	if err != nil {
		g.log.Debug("console history: vouchers", zap.Error(err))
		return
	}
	if len(vs) > historyVouchers {
		vs = vs[len(vs)-historyVouchers:]
	}
	names := make(map[string]string, len(vs))
	p.Stock = make(map[string]int64, len(vs))
	for _, v := range vs {
		id := idString(v.ID)
		names[id] = v.Name
		if n, found, err := g.redis.RemainingStock(ctx, v.ID); err == nil && found {
			p.Stock[id] = n
		}
	}
	p.Backlog = make(map[string]int64, g.redis.Partitions())
	for part := range g.redis.Partitions() {
		if b, err := g.redis.PartitionBacklog(ctx, part); err == nil {
			p.Backlog[strconv.Itoa(part)] = b.Length
		}
	}
	g.history.mu.Lock()
	g.history.names = names
	g.history.mu.Unlock()
}

// claimBuckets reads the claim duration histogram, every result summed:
// the cumulative count of each of latencyBuckets, then the total.
func (g *Gateway) claimBuckets() []uint64 {
	out := make([]uint64, len(latencyBuckets)+1)
	ch := make(chan prometheus.Metric, 16)
	go func() {
		g.metrics.claimSeconds.Collect(ch)
		close(ch)
	}()
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) != nil || d.GetHistogram() == nil {
			continue
		}
		for i, b := range d.GetHistogram().GetBucket() {
			if i < len(latencyBuckets) {
				out[i] += b.GetCumulativeCount()
			}
		}
		out[len(latencyBuckets)] += d.GetHistogram().GetSampleCount()
	}
	return out
}

// quantileMS is the q-quantile, in milliseconds, of the observations made
// between two readings of claimBuckets, interpolated linearly within its
// bucket as Prometheus's histogram_quantile does; nil if there were none.
// Beyond the last bucket it is the last bucket's bound.
func quantileMS(q float64, before, after []uint64) *float64 {
	if len(before) != len(after) || len(after) == 0 {
		return nil
	}
	delta := func(i int) float64 { return float64(after[i] - before[i]) }
	total := delta(len(after) - 1)
	if total == 0 {
		return nil
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for i, upper := range latencyBuckets {
		c := delta(i)
		if c >= rank {
			v := lower + (upper-lower)*(rank-below)/math.Max(c-below, 1e-9)
			ms := math.Round(v*1e6) / 1e3
			return &ms
		}
		lower, below = upper, c
	}
	ms := latencyBuckets[len(latencyBuckets)-1] * 1e3
	return &ms
}
