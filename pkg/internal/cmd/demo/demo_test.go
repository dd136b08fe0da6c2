package main

import (
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/event"
	"github.com/flashsale/flashsale/pkg/internal/testsink"
)

// make demo with a sink set runs the reaper, relays the sale's events to
// it and says how many it delivered: every event published.
func TestTheDemoSaysWhatTheSinkDelivered(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	hook := testsink.NewReceiver(t)
	cmd := exec.Command("go", "run", ".", "-stock", "50", "-users", "200", "-requests", "400", "-concurrency", "16")
	cmd.Env = append(os.Environ(), "FLASHSALE_EVENTS_WEBHOOK_URLS="+hook.URL, "FLASHSALE_EVENTS_WEBHOOK_SECRET="+testsink.Secret)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	m := regexp.MustCompile(`events: (\d+) published`).FindSubmatch(out)
	require.NotNil(t, m, "%s", out)
	sink, err := event.WebhookName(hook.URL)
	require.NoError(t, err)
	require.Contains(t, string(out), sink+" delivered "+string(m[1])+", failed 0", "%s", out)
	require.Equal(t, string(m[1]), strconv.Itoa(hook.Delivered()))
	require.Empty(t, hook.Unverified())
}
