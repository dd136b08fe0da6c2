package gateway

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/history"
	"github.com/flashsale/flashsale/pkg/room"
)

// Claim results, the "result" label of flashsale_claims_total.
const (
	resultAdmitted       = "admitted"        // 202, a new order
	resultEntered        = "entered"         // 202, a new entry of a draw
	resultReplayed       = "replayed"        // 202, an earlier admission under the same Idempotency-Key
	resultRejected       = "rejected"        // 409/404 from the script: reason says which
	resultInvalid        = "invalid"         // 4xx before the script ran: bad token, id, key
	resultUnavailable    = "unavailable"     // 503: Redis slow or down, or the partition overloaded
	resultOutcomeUnknown = "outcome_unknown" // 503: sent to Redis, its reply late: claim_id tells it later
)

var latencyBuckets = []float64{.0002, .0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1}

type metrics struct {
	claims        *prometheus.CounterVec   // result, reason
	claimSeconds  *prometheus.HistogramVec // result
	scriptSeconds prometheus.Histogram
	// pruned counts claims answered sold_out without Redis (pkg/soldout).
	pruned prometheus.Counter
	// mysqlShed counts requests answered 503 because MySQLMaxInflight
	// requests were already waiting on MySQL.
	mysqlShed prometheus.Counter
	// shed counts requests refused before any work, by why (overloaded,
	// ip_rate, user_rate, page_rate, forwarded_for); limiterKeys the rate limiters' buckets.
	shed        *prometheus.CounterVec
	limiterKeys *prometheus.GaugeVec
	// legacyWebhooks counts webhooks accepted with the old signature
	// over the body alone (FLASHSALE_PAYMENT_WEBHOOK_LEGACY).
	legacyWebhooks prometheus.Counter
	// rooms: the waiting rooms' answers by operation and state, and each
	// served room's figures from its last tick (room.go).
	roomAnswers                           *prometheus.CounterVec
	roomWaiting, roomAdmitted, roomPasses *prometheus.GaugeVec
	roomCounters                          map[outcomeKey]prometheus.Counter
	// outcomes holds the counter and histogram of every (result, reason)
	// a claim can end in, resolved once: no label lookup per claim.
	outcomes map[outcomeKey]outcome
	// lateOutcomes counts how the claims answered outcome_unknown
	// resolved (outcome.go).
	lateOutcomes *prometheus.CounterVec
}

type outcomeKey struct{ result, reason string }

type outcome struct {
	count   prometheus.Counter
	seconds prometheus.Observer
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
		pruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flashsale_claims_pruned_total", Help: "Claims answered sold_out by the gateway without running the admission script (FLASHSALE_SOLD_OUT_REFRESH).",
		}),
		legacyWebhooks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flashsale_payment_webhooks_legacy_total", Help: "Payment webhooks accepted with the old signature over the body alone (FLASHSALE_PAYMENT_WEBHOOK_LEGACY): a provider still to migrate.",
		}),
		mysqlShed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "flashsale_mysql_requests_shed_total", Help: "Requests answered 503 at once because FLASHSALE_MYSQL_MAX_INFLIGHT requests were waiting on MySQL.",
		}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flashsale_requests_shed_total", Help: "Requests refused before any work: overloaded (503), ip_rate, user_rate or page_rate (429), forwarded_for (400: a trusted proxy's hop that is no address).",
		}, []string{"reason"}),
		limiterKeys: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flashsale_rate_limiter_keys", Help: "Buckets the in-process rate limiters hold (users or addresses seen recently).",
		}, []string{"limiter"}),
		roomAnswers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flashsale_room_answers_total", Help: "Waiting-room answers, by op (join, poll) and the waiter's state.",
		}, []string{"op", "state"}),
		roomWaiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flashsale_room_waiting", Help: "Places given and not yet admitted, per waiting room this gateway serves (its last tick).",
		}, []string{"voucher"}),
		roomAdmitted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flashsale_room_admitted", Help: "Places admitted so far, per waiting room this gateway serves.",
		}, []string{"voucher"}),
		roomPasses: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "flashsale_room_passes_outstanding", Help: "Passes admitted, not lapsed and not yet used to buy, per waiting room this gateway serves.",
		}, []string{"voucher"}),
		outcomes: map[outcomeKey]outcome{},
		lateOutcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "flashsale_claim_late_outcomes_total", Help: "Outcomes of claims answered outcome_unknown: admitted or refused (their replies came late and were recorded), lost (no reply: the buyer's orders tell), refused_by_time (no order, and Redis's clock past the claim's horizon and a second).",
		}, []string{"outcome"}),
	}
	reg.MustRegister(m.claims, m.claimSeconds, m.scriptSeconds, m.pruned, m.mysqlShed, m.shed, m.limiterKeys, m.legacyWebhooks,
		m.roomAnswers, m.roomWaiting, m.roomAdmitted, m.roomPasses, m.lateOutcomes)
	keys := []outcomeKey{{resultAdmitted, ""}, {resultEntered, ""}, {resultReplayed, ""}, {resultInvalid, ""}, {resultUnavailable, ""}, {resultOutcomeUnknown, ""}}
	for _, e := range errorTable {
		if e.api.Status < 500 {
			keys = append(keys, outcomeKey{resultRejected, e.api.Code})
		}
	}
	for _, k := range keys {
		m.outcomes[k] = outcome{m.claims.WithLabelValues(k.result, k.reason), m.claimSeconds.WithLabelValues(k.result)}
	}
	m.roomCounters = map[outcomeKey]prometheus.Counter{}
	for _, op := range []string{"join", "poll"} {
		for _, st := range []string{room.Waiting, room.Admitted, room.SoldOut, room.Closed, room.Paused, room.Lapsed} {
			m.roomCounters[outcomeKey{op, st}] = m.roomAnswers.WithLabelValues(op, st)
		}
	}
	return m
}

// outcome returns the metrics of a claim's end; the map is read-only after
// newMetrics, so no lock is needed.
func (m *metrics) outcome(result, reason string) outcome {
	if o, ok := m.outcomes[outcomeKey{result, reason}]; ok {
		return o
	}
	return outcome{m.claims.WithLabelValues(result, reason), m.claimSeconds.WithLabelValues(result)}
}

// roomAnswer counts a queue answer; the (op, state) counters are resolved
// once (newMetrics), not per poll.
func (m *metrics) roomAnswer(op, state string) {
	if c, ok := m.roomCounters[outcomeKey{op, state}]; ok {
		c.Inc()
		return
	}
	m.roomAnswers.WithLabelValues(op, state).Inc()
}

// roomFigures publishes room v's figures from its state s.
func (m *metrics) roomFigures(v int64, s *room.Snapshot) {
	id := httpapi.IDString(v)
	m.roomWaiting.WithLabelValues(id).Set(float64(s.Waiting()))
	m.roomAdmitted.WithLabelValues(id).Set(float64(s.Front))
	m.roomPasses.WithLabelValues(id).Set(float64(s.Live))
}

func (m *metrics) forgetRoom(v int64) {
	id := httpapi.IDString(v)
	m.roomWaiting.DeleteLabelValues(id)
	m.roomAdmitted.DeleteLabelValues(id)
	m.roomPasses.DeleteLabelValues(id)
}

// claimTotals reads this replica's claim counters (the Prometheus ones:
// nothing more is counted on the claim path) by result, "rejected:<code>"
// for rejections.
func (g *Gateway) claimTotals() map[string]int64 { return history.Totals(g.metrics.claims) }
