package event_test

import (
	"context"
	"encoding/json"
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
	} {
		m := event.NewMessage(event.Of("shop", db.Event{Snapshot: snap, Row: 4, K: 1, Sequence: 41, OccurredAt: paid}))
		var v any
		require.NoError(t, json.Unmarshal(m.Body, &v))
		require.NoError(t, schema.VisitJSON(v), "%s", m.Body)
	}
}
