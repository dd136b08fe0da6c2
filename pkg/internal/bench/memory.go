package bench

// The gateway's memory after a number of distinct users (peak
// RSS ≤ 50 MB after 200,000), measured on a gateway that has served
// nothing else: every other row's users would count too.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/flashsale/flashsale/pkg/internal/harness"
)

// MemoryRun is a fresh gateway's memory after Users distinct users each
// claimed once (admitted), from Conns connections.
type MemoryRun struct {
	Users   int   `json:"users"`
	Conns   int   `json:"conns"`
	PeakRSS int64 `json:"gateway_peak_rss_bytes"`
	// RSS is the resident set at the end, after the run.
	RSS int64 `json:"gateway_rss_bytes"`
	// FileRSS is the part of RSS mapped from files (the binary's text and
	// data) at the end; the rest is heap, stacks and the runtime's own.
	FileRSS int64 `json:"gateway_file_rss_bytes"`
	// Go is the gateway's runtime's own account at the end, from its
	// /metrics (go_memstats_*_bytes without the prefix, go_goroutines).
	Go map[string]float64 `json:"gateway_go,omitempty"`
}

// goMemory names the Go collector's series memoryRun keeps: where the
// anonymous part of the RSS is.
var goMemory = []string{"go_memstats_heap_inuse_bytes", "go_memstats_heap_idle_bytes", "go_memstats_heap_released_bytes",
	"go_memstats_stack_inuse_bytes", "go_memstats_sys_bytes", "go_memstats_next_gc_bytes", "go_goroutines"}

// memoryRun drives users distinct users' claims at s's fresh gateway and
// reads its memory; with cfg.ProfileDir it keeps a heap profile.
func memoryRun(ctx context.Context, s *harness.Stack, cfg Config, tokens []string, host string) (MemoryRun, error) {
	m := MemoryRun{Users: cfg.E2EUsers, Conns: cfg.Conns[0]}
	if len(tokens) < m.Users {
		return m, fmt.Errorf("%d tokens for %d users", len(tokens), m.Users)
	}
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "memory", Stock: int64(m.Users) * 2, PerUserLimit: 1})
	if err != nil {
		return m, err
	}
	path := "/v1/vouchers/" + strconv.FormatInt(v, 10) + "/orders"
	r := Drive(Load{Addr: host, Conns: m.Conns, Duration: 10 * time.Minute, MaxRequests: int64(m.Users),
		Next: func(i int64) []byte { return Request(host, path, tokens[i]) }})
	if r.Status[http.StatusAccepted] != int64(m.Users) {
		return m, fmt.Errorf("memory run: %v answers, %d admissions wanted", r.Status, m.Users)
	}
	if m.PeakRSS, err = PeakRSS(s.Gateway.Pid()); err != nil {
		return m, err
	}
	if m.RSS, err = RSS(s.Gateway.Pid()); err != nil {
		return m, err
	}
	if m.FileRSS, err = procStatus(s.Gateway.Pid(), "RssFile:"); err != nil {
		return m, err
	}
	if m.Go, err = scrapeGauges(s.Gateway.OpsURL+"/metrics", goMemory); err != nil {
		return m, err
	}
	cfg.logf("gateway after %d distinct users (%d conns): peak RSS %.1f MB, now %.1f MB (%.1f MB of it mapped from files)", m.Users, m.Conns, float64(m.PeakRSS)/1e6, float64(m.RSS)/1e6, float64(m.FileRSS)/1e6)
	if cfg.ProfileDir != "" {
		return m, download(s.Gateway.PprofURL+"/debug/pprof/heap", filepath.Join(cfg.ProfileDir, "gateway.heap.pprof"))
	}
	return m, nil
}

// scrapeGauges reads the unlabelled series names from a Prometheus text
// exposition at url; a name it does not find is an error.
func scrapeGauges(url string, names []string) (map[string]float64, error) {
	res, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	out := make(map[string]float64, len(names))
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || !want[name] {
			continue
		}
		if out[strings.TrimPrefix(strings.TrimSuffix(name, "_bytes"), "go_memstats_")], err = strconv.ParseFloat(val, 64); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", url, name, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) != len(names) {
		return nil, fmt.Errorf("%s: %d of the series %v", url, len(out), names)
	}
	return out, nil
}

func (r *Report) printMemory(w io.Writer) {
	if r.Memory == nil {
		return
	}
	m := r.Memory
	fmt.Fprintf(w, "\na fresh gateway after %d distinct users' admitted claims (%d conns): peak RSS %.1f MB (target ≤ 50 MB), %.1f MB at the end, %.1f MB of it mapped from files (the binary)\n",
		m.Users, m.Conns, float64(m.PeakRSS)/1e6, float64(m.RSS)/1e6, float64(m.FileRSS)/1e6)
	if g := m.Go; g != nil {
		fmt.Fprintf(w, "  its Go runtime at the end: heap in use %.1f MB, heap idle %.1f MB (%.1f MB of it returned to the OS), stacks %.1f MB for %.0f goroutines, next GC at %.1f MB, %.1f MB obtained from the OS in all\n",
			g["heap_inuse"]/1e6, g["heap_idle"]/1e6, g["heap_released"]/1e6, g["stack_inuse"]/1e6, g["go_goroutines"], g["next_gc"]/1e6, g["sys"]/1e6)
	}
}
