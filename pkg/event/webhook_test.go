package event_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/event"
	"github.com/flashsale/flashsale/pkg/internal/testsink"
)

// An endpoint answering 200 with headers past WebhookMaxHeaderBytes has
// not taken the event: the client stops reading at the bound (Go's
// default let 10 MiB a lane in) and the delivery fails, to be retried.
func TestAnEndpointsAnswerHeadersAreBounded(t *testing.T) {
	big := strings.Repeat("x", 8<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for i := range 1024 { // 8 MiB of headers
			w.Header().Set("X-Pad-"+strings.Repeat("a", i%7)+string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676)), big)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	small := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Pad", strings.Repeat("x", event.WebhookMaxHeaderBytes/2))
		w.WriteHeader(http.StatusNoContent)
	}))
	defer small.Close()
	now := time.Now().UTC()
	m := event.Of("shop", db.OutboxEvent{Snapshot: db.Snapshot{OrderID: 1, VoucherID: 1, UserID: "u", Status: "created", Quantity: 1,
		CreatedAt: now, ExpiresAt: now}, Row: 1, Sequence: 1, OccurredAt: now})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := event.NewWebhook(srv.URL+"/hook", testsink.Secret, 10*time.Second)
	require.NoError(t, err)
	n, err := w.Send(ctx, []event.Event{m})
	require.Zero(t, n)
	require.Error(t, err)
	require.Contains(t, err.Error(), "header")
	ok, err := event.NewWebhook(small.URL+"/hook", testsink.Secret, 10*time.Second)
	require.NoError(t, err)
	n, err = ok.Send(ctx, []event.Event{m})
	require.NoError(t, err, "headers within the bound are read")
	require.Equal(t, 1, n)
}
