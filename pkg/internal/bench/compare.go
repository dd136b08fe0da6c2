package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
)

// Regression is how much worse than a committed run a row may be before
// the comparison flags it: 10 %.
const Regression = 0.10

// Change is one row of a run compared with the same row of a baseline.
type Change struct {
	Row      string
	Metric   string
	Before   float64
	Now      float64
	Relative float64 // (now - before) / before
	// Worse: the row moved the wrong way by more than Regression (more CPU
	// per claim, fewer claims or orders per second).
	Worse bool
}

// LoadReport reads a run's JSON (docs/bench-*.json).
func LoadReport(path string) (*Report, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// Compare lists, for every row the run and the baseline both have, the
// change of what it measures: CPU per request (lower is better), and the
// rates (higher is better).
func Compare(base, run *Report) []Change {
	var out []Change
	add := func(row, metric string, before, now float64, lowerIsBetter bool) {
		if before <= 0 || now <= 0 {
			return
		}
		rel := (now - before) / before
		worse := rel > Regression
		if !lowerIsBetter {
			worse = -rel > Regression
		}
		out = append(out, Change{Row: row, Metric: metric, Before: before, Now: now, Relative: rel, Worse: worse})
	}
	cpu := map[string]CPUMeasure{}
	for _, m := range base.CPU {
		cpu[m.Name] = m
	}
	for _, m := range run.CPU {
		b, ok := cpu[m.Name]
		if !ok {
			continue
		}
		add(m.Name, "server µs/req", b.ProcessUs, m.ProcessUs, true)
		add(m.Name, "× bare handler", b.VsBare, m.VsBare, true)
		add(m.Name, "redis µs/req", b.RedisUs, m.RedisUs, true)
		add(m.Name, "p99 µs", b.P99us, m.P99us, true)
		add(m.Name, "redis µs/order persisted", b.RedisPersistUs, m.RedisPersistUs, true)
	}
	measures := func(ms []Measure) map[string]Measure {
		out := map[string]Measure{}
		for _, m := range ms {
			out[m.Name+"|"+strconv.Itoa(m.Conns)+"|"+m.Mode] = m
		}
		return out
	}
	for _, pair := range [][2][]Measure{{base.Gateway, run.Gateway}, {base.RedisCeiling, run.RedisCeiling}, {base.HTTPCeiling, run.HTTPCeiling}} {
		before := measures(pair[0])
		for _, m := range pair[1] {
			if b, ok := before[m.Name+"|"+strconv.Itoa(m.Conns)+"|"+m.Mode]; ok && m.Rate == 0 {
				add(fmt.Sprintf("%s, %d conns", m.Name, m.Conns), "per second", b.RPS, m.RPS, false)
			}
		}
	}
	drains := map[string]Drain{}
	for _, d := range base.Drain {
		drains[fmt.Sprintf("%s|%d|%d", d.Name, d.Workers, d.BatchSize)] = d
	}
	for _, d := range run.Drain {
		if b, ok := drains[fmt.Sprintf("%s|%d|%d", d.Name, d.Workers, d.BatchSize)]; ok {
			add(fmt.Sprintf("drain, %s, %d workers", d.Name, d.Workers), "orders/s", b.PerSecond, d.PerSecond, false)
			add(fmt.Sprintf("drain, %s, %d workers", d.Name, d.Workers), "redis µs/order", b.RedisUs, d.RedisUs, true)
		}
	}
	outs := map[int]ScaleOut{}
	for _, so := range base.ScaleOut {
		outs[so.Buckets] = so
	}
	for _, so := range run.ScaleOut {
		if b, ok := outs[so.Buckets]; ok {
			add(fmt.Sprintf("hot voucher, stock_buckets=%d", so.Buckets), "admissions/s", b.PerSecond, so.PerSecond, false)
		}
	}
	if b, r := base.Split, run.Split; b != nil && r != nil {
		add("hot voucher split by itself, after", "admissions/s", b.After.PerSecond, r.After.PerSecond, false)
		add("hot voucher split by itself", "pause ms", b.PauseMs, r.PauseMs, true)
		add("hot voucher split by itself", "longest call ms", b.LongestUs/1000, r.LongestUs/1000, true)
	}
	dur := map[string]DurabilityRun{}
	for _, d := range base.Durability {
		dur[d.Mode] = d
	}
	for _, d := range run.Durability {
		if b, ok := dur[d.Mode]; ok {
			add(d.Claim.Name, "claims/s", b.Claim.RPS, d.Claim.RPS, false)
		}
	}
	if b, r := base.Memory, run.Memory; b != nil && r != nil && b.Users == r.Users && b.Conns == r.Conns {
		add(fmt.Sprintf("a fresh gateway after %d users, %d conns", r.Users, r.Conns), "peak RSS MB", float64(b.PeakRSS)/1e6, float64(r.PeakRSS)/1e6, true)
	}
	if b, r := base.Room, run.Room; b != nil && r != nil {
		add("waiting-room polls", "× bare handler", b.Poll.VsBare, r.Poll.VsBare, true)
		add("waiting-room polls", "server µs/req", b.Poll.ProcessUs, r.Poll.ProcessUs, true)
		add("waiting room, a million waiters", "bytes/waiter", b.HashBytesPerWaiter, r.HashBytesPerWaiter, true)
		add("waiting room, a join", "redis µs", b.JoinRedisUs, r.JoinRedisUs, true)
	}
	return out
}

// PrintChanges writes the comparison with the baseline at path, flagging
// the rows more than Regression worse. On a shared, noisy machine a single
// run moves by that much on its own: read CPU per request and the ratios
// to the bare handler measured in the same run, and rerun before believing
// a flag (docs/BENCHMARKS.md).
func PrintChanges(w io.Writer, path string, base *Report, changes []Change) (flagged int) {
	fmt.Fprintf(w, "\ncompared with %s (run %s):\n", path, base.When.Format("2006-01-02 15:04"))
	if len(changes) == 0 {
		fmt.Fprintln(w, "  no row in common")
		return 0
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "row\tmetric\tbefore\tnow\tchange\t\t")
	for _, c := range changes {
		flag := ""
		if c.Worse {
			flag = fmt.Sprintf("WORSE by more than %.0f %%", Regression*100)
			flagged++
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%+.1f %%\t%s\t\n", c.Row, c.Metric, c.Before, c.Now, 100*c.Relative, flag)
	}
	tw.Flush()
	return flagged
}
