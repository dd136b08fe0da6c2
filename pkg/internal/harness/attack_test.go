package harness_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/bench"
	"github.com/flashsale/flashsale/pkg/internal/harness"
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
