package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Claim results, the "result" label of flashsale_claims_total.
const (
	resultAdmitted    = "admitted"    // 202, a new order
	resultReplayed    = "replayed"    // 202, an earlier admission under the same Idempotency-Key
	resultRejected    = "rejected"    // 409/404 from the script: reason says which
	resultInvalid     = "invalid"     // 4xx before the script ran: bad token, id, key
	resultUnavailable = "unavailable" // 503: Redis slow or down, or the partition overloaded
)

var latencyBuckets = []float64{.0002, .0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1}

type metrics struct {
	claims        *prometheus.CounterVec   // result, reason
	claimSeconds  *prometheus.HistogramVec // result
	scriptSeconds prometheus.Histogram
	admitted      prometheus.Counter // claims{result="admitted"}, resolved once for the hot path
	admittedTime  prometheus.Observer
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flashsale_claims_total", Help: "Claims answered, by result and, for rejections, reason (the error code).",
		}, []string{"result", "reason"}),
		claimSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "flashsale_claim_duration_seconds", Help: "Time to answer a claim, by result.", Buckets: latencyBuckets,
		}, []string{"result"}),
		scriptSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "flashsale_redis_script_duration_seconds", Help: "Round trip of the admission script.", Buckets: latencyBuckets,
			ConstLabels: prometheus.Labels{"script": "admit"},
		}),
	}
	reg.MustRegister(m.claims, m.claimSeconds, m.scriptSeconds)
	m.admitted = m.claims.WithLabelValues(resultAdmitted, "")
	m.admittedTime = m.claimSeconds.WithLabelValues(resultAdmitted)
	return m
}
