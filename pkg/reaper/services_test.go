package reaper

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// Each service that counts has a result type of its own and a field of
// Results named after it, in the services' order; every count has a log
// tag, and no two counts of any service are logged under one key.
func TestEachServiceHasItsResult(t *testing.T) {
	var results Results
	var r Reaper
	var named []string
	for _, s := range r.services(&results) {
		if s.name != "checker" {
			named = append(named, strings.ToUpper(s.name[:1])+s.name[1:])
		}
	}
	typ := reflect.TypeFor[Results]()
	var fields []string
	keys := map[string]string{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		fields = append(fields, f.Name)
		require.Equal(t, f.Name+"Result", f.Type.Name(), "Results.%s is of its service's result type", f.Name)
		for j := range f.Type.NumField() {
			c := f.Type.Field(j)
			key := c.Tag.Get("log")
			require.NotEmpty(t, key, "%s.%s has no log tag", f.Type.Name(), c.Name)
			require.True(t, key == "-" || keys[key] == "", "%s.%s and %s are both logged as %s", f.Type.Name(), c.Name, keys[key], key)
			keys[key] = f.Type.Name() + "." + c.Name
		}
	}
	require.Equal(t, named, fields, "a field of Results for each service that counts, in the services' order")
}

// A round's result lands in its service's field of Results, and only
// there: each round starts from zero.
func TestARoundKeepsItsResultInItsField(t *testing.T) {
	var results Results
	rounds := 0
	s := newService("expirer", 0, func(_ context.Context, res *ExpirerResult) error {
		rounds++
		res.Cancelled += 3
		return nil
	}, &results.Expirer)
	for range 2 {
		got, err := s.round(context.Background())
		require.NoError(t, err)
		require.Equal(t, ExpirerResult{Cancelled: 3}, got)
	}
	require.Equal(t, 2, rounds)
	require.Equal(t, Results{Expirer: ExpirerResult{Cancelled: 3}}, results)
}

// A round's line names what it did, each count under its log tag, and
// nothing it did not; a result with metrics counts them.
func TestARoundLogsWhatItDid(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	r := &Reaper{log: zap.New(core), metrics: newMetrics(prometheus.NewRegistry())}
	r.record("rescuer", RescuerResult{TakenOver: 2, DeadLettered: 1}, nil)
	r.record("sequencer", SequencerResult{EventsSequenced: 5}, nil)
	r.record("checker", struct{}{}, nil)
	lines := logs.FilterMessage("reaper round").All()
	require.Len(t, lines, 1, "a round that only sequenced events, or counts nothing, logs no line")
	require.Equal(t, map[string]any{"service": "rescuer", "taken_over": int64(2), "dead_lettered": int64(1)}, lines[0].ContextMap())
	require.InDelta(t, 2, counterValue(t, r.metrics.takenOver), 0)
	require.InDelta(t, 1, counterValue(t, r.metrics.deadLetters), 0)
	require.InDelta(t, 1, counterValue(t, r.metrics.rounds.WithLabelValues("checker", "ok")), 0)
}

// counterValue is a counter's value.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}
