package testsrv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Proxy is a toxiproxy TCP proxy in front of a test's server, for the
// network faults a kill cannot show: a connection reset, or one that stops
// answering, in the middle of a batch. Faults act on the answers (the
// downstream direction): the server does the work, the client never hears
// of it, which is the hardest case for exactly-once.
type Proxy struct {
	// Addr is host:port to connect to instead of the server's.
	Addr string
	p    *toxiproxy.Proxy
}

// NewProxy starts a proxy to upstream (host:port) and stops it at cleanup.
func NewProxy(tb testing.TB, upstream string) *Proxy {
	tb.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "proxy-"+upstream, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		tb.Fatalf("start toxiproxy to %s: %v", upstream, err)
	}
	tb.Cleanup(p.Stop)
	return &Proxy{Addr: p.Listen, p: p}
}

// Reset resets (TCP RST) every connection as soon as the server answers on
// it, until Heal.
func (p *Proxy) Reset() error {
	return p.add("reset", `"type":"reset_peer","attributes":{"timeout":0}`)
}

// Stall drops every answer and keeps the connections open, as a hung
// server or a black-holed network does, until Heal.
func (p *Proxy) Stall() error { return p.add("stall", `"type":"timeout","attributes":{"timeout":0}`) }

// Delay holds every answer d before it passes, until Heal.
func (p *Proxy) Delay(d time.Duration) error {
	return p.add("latency", fmt.Sprintf(`"type":"latency","attributes":{"latency":%d}`, d.Milliseconds()))
}

// Heal removes every fault.
func (p *Proxy) Heal() { p.p.Toxics.ResetToxics(context.Background()) }

func (p *Proxy) add(name, spec string) error {
	_, err := p.p.Toxics.AddToxicJson(strings.NewReader(`{"name":"` + name + `","stream":"downstream",` + spec + `}`))
	if err != nil {
		return fmt.Errorf("toxic %s: %w", name, err)
	}
	return nil
}
