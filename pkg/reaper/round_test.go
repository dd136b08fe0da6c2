package reaper

import (
	"reflect"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// A round's line names what it did, each count under its field's tag, and
// nothing it did not; Add adds every count.
func TestARoundLogsWhatItDid(t *testing.T) {
	typ := reflect.TypeFor[Round]()
	keys := map[string]bool{}
	for i := range typ.NumField() {
		key := typ.Field(i).Tag.Get("log")
		require.NotEmpty(t, key, "Round.%s has no log tag", typ.Field(i).Name)
		require.False(t, keys[key] && key != "-", "two counts logged as %s", key)
		keys[key] = true
	}

	var all Round
	v := reflect.ValueOf(&all).Elem()
	for i := range v.NumField() {
		v.Field(i).SetInt(int64(i + 1))
	}
	sum := all
	sum.Add(all)
	for i := range v.NumField() {
		require.EqualValues(t, 2*(i+1), reflect.ValueOf(sum).Field(i).Int(), "Round.%s", typ.Field(i).Name)
	}

	core, logs := observer.New(zap.InfoLevel)
	r := &Reaper{log: zap.New(core), metrics: newMetrics(prometheus.NewRegistry())}
	r.record("rescuer", Round{TakenOver: 2, EventsSequenced: 5, Split: 1}, nil)
	r.record("sequencer", Round{EventsSequenced: 5}, nil)
	lines := logs.FilterMessage("reaper round").All()
	require.Len(t, lines, 1, "a round that only sequenced events logs no line")
	require.Equal(t, map[string]any{"service": "rescuer", "taken_over": int64(2), "split": int64(1)}, lines[0].ContextMap())
}
