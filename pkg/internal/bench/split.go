package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
	"github.com/flashsale/flashsale/pkg/rdb/split"
	"github.com/flashsale/flashsale/pkg/reaper"
	"github.com/flashsale/flashsale/pkg/worker"
)

// SplitRun is a hot voucher that starts on one bucket of a 3-master
// cluster and is split by itself while it sells: the reaper's detector
// and splitter, with the threshold at half the rate measured before.
// Every claim carries an idempotency key, as the API asks of clients: the
// split copies a moving buyer's record with their count.
type SplitRun struct {
	HotSplitAt int64 `json:"hot_split_at"`
	// HeldAt: the admissions a second the claims are held at from the
	// threshold's setting to the split done (unpaced before and after).
	HeldAt int64 `json:"held_at"`
	To     int   `json:"to_buckets"`
	// Before and After: admissions a second and each master's share of
	// the script CPU, for Duration each, before the threshold is set and
	// once the split is done.
	Before ScaleOut `json:"before"`
	After  ScaleOut `json:"after"`
	// HotToSplitMs: from the first detector reading above the threshold
	// (hot_since) to the split recorded done (split_at): the
	// FLASHSALE_HOT_SPLIT_FOR it must last (2 s here) plus the split.
	HotToSplitMs float64 `json:"hot_to_split_done_ms"`
	// SplitMs: the splitter's own time (flashsale_split_seconds), and
	// PauseMs the part of it the moving buyers' claims waited
	// (flashsale_split_pause_seconds: freeze to switch).
	SplitMs float64 `json:"split_ms"`
	PauseMs float64 `json:"pause_ms"`
	// BuyersAtSplit: the buyers the bucket held when it split (its
	// admissions until then, one unit each): what the copy reads.
	BuyersAtSplit int64 `json:"buyers_at_split"`
	// LongestUs: the longest call of 32 claims during the split round;
	// LongestAtMs, when it began, from the round's start.
	LongestUs   float64 `json:"longest_call_during_split_us"`
	LongestAtMs float64 `json:"longest_call_at_ms"`
	// P99 of a call of 32 claims: before the split, and during the
	// reaper's round that split it (its detector's read and the split).
	P99BeforeUs float64 `json:"p99_before_us"`
	P99DuringUs float64 `json:"p99_during_split_us"`
	Calls       int     `json:"calls_during_split"`
	// Admitted: every admission of the run; Remaining: the voucher's
	// stock left in Redis, over its buckets (Admitted + Remaining is the
	// stock: nothing lost or sold twice through the split).
	Admitted  int64 `json:"admitted"`
	Remaining int64 `json:"remaining"`
	Stock     int64 `json:"stock"`
}

// timedCall is one call of the driver: when it began, how long it took.
type timedCall struct {
	at time.Time
	d  time.Duration
}

// splitRun measures SplitRun on the cluster stack s.
func splitRun(ctx context.Context, s *harness.Stack, cfg Config) (SplitRun, error) {
	const stock = 10_000_000
	out := SplitRun{Stock: stock}
	cc, store, err := clusterStore(ctx, s)
	if err != nil {
		return out, err
	}
	defer cc.Close()
	adm := admission.New(store, nil)
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "split", Stock: stock, PerUserLimit: 1})
	if err != nil {
		return out, err
	}
	if out.To, err = split.New(store).Target(ctx, v, 1); err != nil {
		return out, err
	}

	// The driver: pipelines of 32 claims from conns clients, every call
	// timed, every admission counted by its partition.
	var calls []timedCall
	var mu sync.Mutex
	perPartition := make([]atomic.Int64, s.RDB.Partitions())
	var admitted atomic.Int64
	dctx, stop := context.WithCancel(ctx)
	var users atomic.Int64
	// pace: while set, the calls' interval (ns): open loop, each call
	// timed from when it was due.
	var pace atomic.Int64
	var paceMu sync.Mutex
	var due time.Time
	var wg sync.WaitGroup
	for range cfg.Conns[0] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for dctx.Err() == nil {
				now := time.Now()
				if gap := time.Duration(pace.Load()); gap > 0 {
					paceMu.Lock()
					if floor := now.Add(-time.Second); due.Before(floor) { // at most a second's calls owed
						due = floor
					}
					due = due.Add(gap)
					at := due
					paceMu.Unlock()
					time.Sleep(time.Until(at))
					now = at
				}
				day := order.Day(now, time.UTC)
				claims := make([]admission.Claim, 32)
				for i := range claims {
					claims[i] = admission.Claim{VoucherID: v, UserID: "s" + strconv.FormatInt(users.Add(1), 10), Now: now, Day: day,
						IdempotencyKey: "k", IdempotencyTTL: time.Hour}
				}
				as, errs, err := adm.AdmitMany(ctx, claims)
				d := time.Since(now)
				if err != nil {
					continue
				}
				for i, e := range errs {
					if e == nil {
						p, _, _ := order.EntryOf(as[i].OrderID)
						perPartition[p].Add(1)
						admitted.Add(1)
					}
				}
				mu.Lock()
				calls = append(calls, timedCall{now, d})
				mu.Unlock()
			}
		}()
	}
	defer func() { stop(); wg.Wait() }()
	window := func(name string) (ScaleOut, error) {
		w := ScaleOut{}
		cpu0, err := mastersCPU(ctx, cc)
		if err != nil {
			return w, err
		}
		counts0 := make([]int64, len(perPartition))
		for p := range perPartition {
			counts0[p] = perPartition[p].Load()
		}
		start := time.Now()
		select {
		case <-ctx.Done():
			return w, ctx.Err()
		case <-time.After(cfg.Duration):
		}
		elapsed := time.Since(start)
		cpu1, err := mastersCPU(ctx, cc)
		if err != nil {
			return w, err
		}
		byMaster := map[string]int64{}
		for p := range perPartition {
			if k := perPartition[p].Load() - counts0[p]; k > 0 {
				m, err := cc.MasterForKey(ctx, rdb.StreamKey(p))
				if err != nil {
					return w, err
				}
				byMaster[m.Options().Addr] += k
				w.Admissions += k
			}
		}
		w.PerSecond = float64(w.Admissions) / elapsed.Seconds()
		for _, addr := range slices.Sorted(maps.Keys(cpu1)) {
			used := cpu1[addr] - cpu0[addr]
			m := MasterCPU{Addr: addr, Admissions: byMaster[addr], CPUSeconds: used.Seconds()}
			if m.Admissions > 0 {
				m.CPUus = float64(used.Microseconds()) / float64(m.Admissions)
			}
			w.Masters = append(w.Masters, m)
			cfg.logf("split, %s: master %s: %d admissions, %.2fs CPU", name, addr, m.Admissions, m.CPUSeconds)
		}
		cfg.logf("split, %s: %.0f admissions/s", name, w.PerSecond)
		return w, nil
	}
	if out.Before, err = window("before"); err != nil {
		return out, err
	}
	out.Before.Buckets = 1

	// The reaper's detector and splitter, once a second; the claims held
	// at cfg.SplitHeld of the rate the one bucket admitted (open loop)
	// until the split is done, the threshold at three quarters of that.
	held := cfg.SplitHeld
	if held <= 0 {
		held = 1.0 / 3
	}
	out.HeldAt = int64(out.Before.PerSecond * held)
	out.HotSplitAt = out.HeldAt * 3 / 4
	paceMu.Lock()
	due = time.Now()
	paceMu.Unlock()
	pace.Store(int64(time.Second) * 32 / out.HeldAt)
	reg := prometheus.NewRegistry()
	r, err := reaper.New(reaper.Config{Config: worker.Config{Consumer: "bench-splitter"}, HotSplitAt: out.HotSplitAt, HotSplitFor: 2 * time.Second},
		store, s.DB, zap.NewNop(), reaper.WithRegistry(reg))
	if err != nil {
		return out, err
	}
	deadline := time.Now().Add(2 * time.Minute)
	var splitFrom time.Time     // the start of the round that split it
	var admittedAt atomic.Int64 // the admissions then
	for {
		splitFrom = time.Now()
		admittedAt.Store(admitted.Load())
		if _, err := r.RunOnly(ctx, "detector", "splitter"); err != nil {
			return out, err
		}
		got, err := s.DB.Voucher(ctx, v)
		if err != nil {
			return out, err
		}
		if got.StockBuckets > 1 {
			out.HotToSplitMs = float64(got.SplitAt.Sub(*got.HotSince).Milliseconds())
			break
		}
		if time.Now().After(deadline) {
			return out, fmt.Errorf("split: voucher %d not split within 2 minutes (hot since %v)", v, got.HotSince)
		}
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	splitDone := time.Now()
	pace.Store(0)
	out.BuyersAtSplit = admittedAt.Load()
	families, err := reg.Gather()
	if err != nil {
		return out, err
	}
	for _, f := range families {
		if len(f.GetMetric()) == 0 {
			continue
		}
		switch f.GetName() {
		case "flashsale_split_seconds":
			out.SplitMs = f.GetMetric()[0].GetHistogram().GetSampleSum() * 1000
		case "flashsale_split_pause_seconds":
			out.PauseMs = f.GetMetric()[0].GetHistogram().GetSampleSum() * 1000
		}
	}
	cfg.logf("split: to %d buckets, %.0f ms from hot to done, the split %.0f ms, the moving buyers' pause %.0f ms",
		out.To, out.HotToSplitMs, out.SplitMs, out.PauseMs)
	if out.After, err = window("after"); err != nil {
		return out, err
	}
	out.After.Buckets = out.To
	stop()
	wg.Wait()

	var before, during []float64
	for _, c := range calls {
		switch {
		case c.at.Before(splitFrom):
			before = append(before, float64(c.d.Microseconds()))
		case c.at.Before(splitDone):
			during = append(during, float64(c.d.Microseconds()))
			if us := float64(c.d.Microseconds()); us > out.LongestUs {
				out.LongestUs, out.LongestAtMs = us, float64(c.at.Sub(splitFrom).Milliseconds())
			}
		}
	}
	out.P99BeforeUs, out.P99DuringUs, out.Calls = p99(before), p99(during), len(during)
	out.Admitted = admitted.Load()
	remaining, _, err := store.RemainingStock(ctx, v)
	if err != nil {
		return out, err
	}
	out.Remaining = remaining
	if out.Admitted+out.Remaining != stock {
		return out, fmt.Errorf("split: %d admitted + %d left in Redis, of %d", out.Admitted, out.Remaining, stock)
	}
	cfg.logf("split: p99 of a call of 32 claims %.0f µs before, %.0f µs during the split round (%d calls, the longest %.0f µs, begun %.0f ms into the round); %d admitted + %d left = the stock",
		out.P99BeforeUs, out.P99DuringUs, out.Calls, out.LongestUs, out.LongestAtMs, out.Admitted, out.Remaining)
	return out, nil
}

// clusterStore is a Store of its own over the cluster stack s's masters,
// its scripts loaded, as a gateway's; close its client when done.
func clusterStore(ctx context.Context, s *harness.Stack) (*redis.ClusterClient, *rdb.Store, error) {
	cc := s.Cluster.Client()
	store, err := rdb.New(cc, s.RDB.Partitions(), "")
	if err == nil {
		err = store.Load(ctx)
	}
	if err != nil {
		cc.Close()
		return nil, nil, err
	}
	return cc, store, nil
}

// mastersCPU is each master's CPU used so far.
func mastersCPU(ctx context.Context, cc *redis.ClusterClient) (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	var mu sync.Mutex
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		t, err := redisCPU(ctx, m)
		mu.Lock()
		out[m.Options().Addr] = t
		mu.Unlock()
		return err
	})
	return out, err
}

// p99 is the 99th percentile of xs (0 when empty).
func p99(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	return xs[min(len(xs)-1, len(xs)*99/100)]
}
