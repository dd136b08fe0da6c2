package event_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/event"
)

// What the webhook sink POSTs (and Kafka carries, and the events API
// answers) is the spec's Event, and the spec's x-webhooks names it.
func TestTheWebhookPayloadIsTheSpecsEvent(t *testing.T) {
	loader := openapi3.NewLoader()
	spec, err := loader.LoadFromFile("../../api/openapi.yaml")
	require.NoError(t, err)
	require.NoError(t, spec.Validate(context.Background()))
	hooks, ok := spec.Extensions["x-webhooks"].(map[string]any)
	require.True(t, ok, "api/openapi.yaml has x-webhooks")
	body := hooks["orderEvent"].(map[string]any)["post"].(map[string]any)["requestBody"].(map[string]any)["content"].(map[string]any)
	ref := body[event.ContentType].(map[string]any)["schema"].(map[string]any)["$ref"]
	require.Equal(t, "#/components/schemas/Event", ref)
	schema := spec.Components.Schemas["Event"].Value

	paid := time.Now().UTC().Truncate(time.Millisecond)
	for _, snap := range []db.Snapshot{
		{OrderID: 9, VoucherID: 3, UserID: "alice", Status: "paid", Quantity: 1, Code: "C-1", CreatedAt: paid, ExpiresAt: paid, PaidAt: &paid},
		{OrderID: 10, VoucherID: 3, UserID: "bob", Status: "cancelled", Reason: "payment_expired", Quantity: 2, CreatedAt: paid, ExpiresAt: paid},
		{OrderID: 11, VoucherID: 4, UserID: "carol", Status: "completed", Quantity: 1, Amount: 250, CreatedAt: paid},
		{VoucherID: 4, Split: &db.Split{Buckets: 3, At: paid}},
	} {
		m := event.Of("shop", db.OutboxEvent{Snapshot: snap, Row: 4, K: 1, Sequence: 41, OccurredAt: paid})
		var v any
		require.NoError(t, json.Unmarshal(m.JSON(), &v))
		require.NoError(t, schema.VisitJSON(v), "%s", m.JSON())
	}
}

// The envelope docs/EVENTS.md shows is the spec's Event (its sequence in
// 20 digits), and the event the sinks send for the same order change
// carries the same fields.
func TestTheDocumentedEnvelopeIsTheSpecsEvent(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "EVENTS.md"))
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)## The envelope.*?```json\n(.*?)```").FindSubmatch(doc)
	require.NotNil(t, m, "docs/EVENTS.md has a JSON envelope under \"The envelope\"")
	spec, err := openapi3.NewLoader().LoadFromFile("../../api/openapi.yaml")
	require.NoError(t, err)
	var v map[string]any
	require.NoError(t, json.Unmarshal(m[1], &v))
	require.NoError(t, spec.Components.Schemas["Event"].Value.VisitJSON(any(v)), "%s", m[1])
	seq, err := strconv.ParseInt(v["sequence"].(string), 10, 64)
	require.NoError(t, err)
	require.Equal(t, v["sequence"], event.Sequence(seq).String())
	paid := time.Now().UTC().Truncate(time.Millisecond)
	e := event.Of("flashsale", db.OutboxEvent{Snapshot: db.Snapshot{OrderID: 384427387514814466, VoucherID: 7, UserID: "alice", Status: "paid", Quantity: 1,
		CreatedAt: paid, ExpiresAt: paid, PaidAt: &paid}, Row: 1042, K: 3, Sequence: seq, OccurredAt: paid})
	var ours map[string]any
	require.NoError(t, json.Unmarshal(e.JSON(), &ours))
	for k := range v {
		require.Contains(t, ours, k)
	}
	require.Equal(t, v["id"], ours["id"])
	require.Equal(t, v["sequence"], ours["sequence"])
}

// Sequences sort as text in their numeric order, across every width.
func TestSequencesSortAsText(t *testing.T) {
	prev := event.Sequence(0).String()
	for _, n := range []int64{1, 9, 10, 99, 100, 20920, 20921, 1 << 40, 1<<63 - 1} {
		s := event.Sequence(n).String()
		require.Len(t, s, event.SequenceWidth)
		require.Less(t, prev, s, "%d", n)
		back, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err)
		require.Equal(t, n, back)
		var read event.Sequence
		require.NoError(t, json.Unmarshal([]byte(`"`+s+`"`), &read))
		require.Equal(t, event.Sequence(n), read)
		written, err := json.Marshal(read)
		require.NoError(t, err)
		require.Equal(t, `"`+s+`"`, string(written))
		prev = s
	}
	for _, bad := range []string{`""`, `"-1"`, `"+1"`, `"1.5"`, `"x"`, `"99999999999999999999"`} {
		var read event.Sequence
		require.Error(t, json.Unmarshal([]byte(bad), &read), bad)
	}
}
