package harness_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/bench"
	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testsink"
)

// Big headers, no login needed: connections that each send a megabyte of
// header lines and hold them took a gateway with Go's default 1 MiB
// header limit from 24 to 303 MiB at 200 connections. Every listener now
// refuses a header over 32 KiB (431, connection closed), so what an
// attacker can make a gateway hold is 32–34 KiB a connection (the test
// logs it: the peak above the resting RSS over the connections).
//
// The bound, 96 MiB of peak RSS with 300 such connections at once: a
// fresh gateway is ~25 MiB; a gateway serving a sale at 256 connections
// peaks at ~53 MiB (docs/BENCHMARKS.md, "Gateway memory"); the chart
// limits the pod to 256 MiB. 96 MiB under this attack leaves that
// working set room under the limit; the old limit needed ~1 MiB a
// connection and blew through it at a third of these connections.
func TestBigHeadersDoNotRunTheGatewayOutOfMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binaries")
	}
	ctx := context.Background()
	s, err := harness.StartStack(ctx, harness.Options{Dir: t.TempDir(), Partitions: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	before, err := bench.RSS(s.Gateway.Pid())
	require.NoError(t, err)

	const conns, perConn, bound = 300, 1 << 20, 96 << 20
	addr := strings.TrimPrefix(s.URL, "http://")
	line := "X-Pad: " + strings.Repeat("a", 1000) + "\r\n"
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused := 0 // connections the gateway closed before the megabyte was sent
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			if _, err := c.Write([]byte("GET /v1/orders HTTP/1.1\r\nHost: x\r\n")); err != nil {
				return
			}
			for sent := 0; sent < perConn; sent += len(line) {
				if _, err := c.Write([]byte(line)); err != nil {
					mu.Lock()
					refused++
					mu.Unlock()
					return
				}
			}
			// Hold the unfinished header until the gateway gives up on it.
			_, _ = c.Read(make([]byte, 512))
		}()
	}
	wg.Wait()
	peak, err := bench.PeakRSS(s.Gateway.Pid())
	require.NoError(t, err)
	t.Logf("gateway RSS %.1f MiB before, peak %.1f MiB with %d connections sending %d KiB of header each (%d cut off early): %.0f KiB a connection; bound %d MiB",
		float64(before)/(1<<20), float64(peak)/(1<<20), conns, perConn>>10, refused, float64(peak-before)/conns/(1<<10), bound>>20)
	require.Less(t, peak, int64(bound), "the gateway's peak RSS under big headers")
	require.False(t, s.Gateway.Exited(), "the gateway died")
}

// A webhook endpoint answering every delivery 200 with 8 MiB of headers
// took the reaper from 33 to 123-151 MiB under the chart's 128 MiB limit
// (Go's client reads 10 MiB of headers, 16 deliveries at once): an
// OOM-kill loop, and no expiry meanwhile. The client reads 64 KiB of an
// answer's headers now (event.WebhookMaxHeaderBytes): the reaper's peak
// RSS stays under 100 MiB with FLASHSALE_MEMORY_LIMIT at 128 MiB while it
// retries such an endpoint, and the orders of a sale expire on time.
func TestAHostileWebhookEndpointDoesNotRunTheReaperOutOfMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binaries")
	}
	var asked atomic.Int64
	pad := strings.Repeat("a", 8<<10)
	hostile := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		for i := range 1024 { // 8 MiB
			w.Header().Set("X-Pad-"+strconv.Itoa(i), pad)
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(hostile.Close)
	ctx := context.Background()
	const bound = 100 << 20
	s, err := harness.StartStack(ctx, harness.Options{Dir: t.TempDir(), Partitions: 1, Workers: 1, Reaper: true,
		ReaperEnv: []string{"FLASHSALE_EVENTS_WEBHOOK_URLS=" + hostile.URL + "/hook", "FLASHSALE_EVENTS_WEBHOOK_SECRET=" + testsink.Secret,
			"FLASHSALE_MEMORY_LIMIT=" + strconv.Itoa(128<<20), "FLASHSALE_REAPER_EXPIRE_INTERVAL=250ms"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "hostile sink", Stock: 40, PerUserLimit: 1, PaymentTimeoutSeconds: 2})
	require.NoError(t, err)
	c := harness.NewClient(s.URL, 4)
	for i := range 20 {
		status, err := c.Do(ctx, "POST", "/v1/vouchers/"+strconv.FormatInt(v, 10)+"/orders", s.Token("h"+strconv.Itoa(i)), nil, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, status)
	}
	// Each order's payment window is 2 s; the reaper looks every 250 ms.
	// "On time": cancelled within 30 s of its deadline, a bound a loaded
	// machine keeps; a reaper in an OOM-kill loop, or stalled behind the
	// endpoint, does not.
	testenv.Eventually(t, 60*time.Second, "the 20 orders cancelled", func() bool {
		var n int64
		require.NoError(t, s.DB.DB().Raw("SELECT COUNT(*) FROM orders WHERE voucher_id = ? AND status = 'cancelled'", v).Scan(&n).Error)
		return n == 20
	})
	var late int64
	require.NoError(t, s.DB.DB().Raw("SELECT COUNT(*) FROM orders WHERE voucher_id = ? AND updated_at > expires_at + INTERVAL 30 SECOND", v).Scan(&late).Error)
	require.Zero(t, late, "orders cancelled more than 30 s after their deadline")
	testenv.Eventually(t, 30*time.Second, "the relay asking the hostile endpoint again and again", func() bool { return asked.Load() >= 5 })
	peak, err := bench.PeakRSS(s.Reaper.Pid())
	require.NoError(t, err)
	t.Logf("reaper peak RSS %.1f MiB after %d deliveries answered with 8 MiB of headers; bound %d MiB", float64(peak)/(1<<20), asked.Load(), bound>>20)
	require.Less(t, peak, int64(bound), "the reaper's peak RSS under a hostile endpoint")
	require.False(t, s.Reaper.Exited(), "the reaper died")
}
