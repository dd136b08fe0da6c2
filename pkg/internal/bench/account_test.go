package bench

import (
	"os"
	"path/filepath"
	"testing"

	pprofile "github.com/google/pprof/profile"
)

// A sample belongs to the first frame from its leaf that a rule owns: a
// socket write under the HTTP server is the kernel's, an allocation under
// the token check is the token check's, the collector's work is its own,
// net/http's router is the routing's though its frames are net/http's.
func TestTheAccountGivesEachSampleToItsOwner(t *testing.T) {
	fn := map[string]*pprofile.Function{}
	var locs uint64
	loc := func(names ...string) []*pprofile.Location { // leaf first
		var out []*pprofile.Location
		for _, n := range names {
			f := fn[n]
			if f == nil {
				f = &pprofile.Function{ID: uint64(len(fn) + 1), Name: n}
				fn[n] = f
			}
			locs++
			out = append(out, &pprofile.Location{ID: locs, Line: []pprofile.Line{{Function: f}}})
		}
		return out
	}
	p := &pprofile.Profile{SampleType: []*pprofile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample: []*pprofile.Sample{
			{Value: []int64{1, 30e6}, Location: loc("syscall.Syscall", "internal/poll.(*FD).Write", "net.(*conn).Write", "net/http.(*response).finishRequest", "net/http.(*conn).serve")},
			{Value: []int64{1, 20e6}, Location: loc("runtime.mallocgc", "github.com/flashsale/flashsale/pkg/token.(*Verifier).Verify", "github.com/flashsale/flashsale/pkg/gateway.(*Gateway).claim", "net/http.(*conn).serve")},
			{Value: []int64{1, 40e6}, Location: loc("runtime.scanobject", "runtime.gcDrain", "runtime.gcBgMarkWorker")},
			{Value: []int64{1, 5e6}, Location: loc("main.unknown")},
			{Value: []int64{1, 5e6}, Location: loc("net/http.(*routingNode).matchPath", "net/http.(*ServeMux).ServeHTTP", "net/http.(*conn).serve")},
		}}
	for _, f := range fn {
		p.Function = append(p.Function, f)
	}
	for _, s := range p.Sample {
		p.Location = append(p.Location, s.Location...)
	}
	path := filepath.Join(t.TempDir(), "cpu.pprof")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	shares, seconds, err := profileShares(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"socket writes (kernel)": 0.3, "token check": 0.2, "garbage collection": 0.4, "other": 0.05,
		"shedding, routing, the claim's checks": 0.05}
	for part, share := range want {
		if got := shares[part]; got < share-1e-9 || got > share+1e-9 {
			t.Errorf("%s: %.3f of the samples, want %.3f (all: %v)", part, got, share, shares)
		}
	}
	if seconds < 0.0999 || seconds > 0.1001 {
		t.Errorf("the samples cover %.4f s, want 0.1", seconds)
	}
	lines := accountOf(shares, shares, 10, 20)
	var bare, gw float64
	for _, l := range lines {
		bare, gw = bare+l.BareUs, gw+l.GatewayUs
	}
	if bare < 9.999 || bare > 10.001 || gw < 19.999 || gw > 20.001 {
		t.Errorf("the account sums to %.3f and %.3f µs, want the measured 10 and 20", bare, gw)
	}
}
