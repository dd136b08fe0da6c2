package bench

import (
	"fmt"
	"github.com/flashsale/flashsale/pkg/internal/harness"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Print writes the report as the tables docs/BENCHMARKS.md shows.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "machine: %s\nwhen: %s\n", r.Machine, r.When.Format(time.RFC3339))
	if len(r.Env) > 0 {
		fmt.Fprintf(w, "environment added: %s\n", strings.Join(r.Env, " "))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	if len(r.HTTPCeiling)+len(r.RedisCeiling)+len(r.Gateway) > 0 { // not -memory-only, -draw-only, …
		fmt.Fprintln(tw, "measurement\tconns\tmode\tper second\tp50\tp90\tp99\tp99.9\tanswers\t")
	}
	row := func(m Measure, unit string) {
		lat := func(v int64) string {
			if v == 0 {
				return "-"
			}
			return us(v)
		}
		mode := m.Mode
		if m.Rate > 0 {
			mode = fmt.Sprintf("open @%d/s", m.Rate)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.0f %s\t%s\t%s\t%s\t%s\t%s\t\n", m.Name, m.Conns, mode, m.RPS, unit,
			lat(m.P50us), lat(m.P90us), lat(m.P99us), lat(m.P999us), answers(m))
	}
	for _, m := range r.HTTPCeiling {
		row(m, "req")
	}
	for _, m := range r.RedisCeiling {
		row(m, "adm")
	}
	for _, m := range r.Gateway {
		row(m, "claims")
	}
	tw.Flush()
	r.printCPU(w)
	r.printDurability(w)
	r.printDraw(w)
	r.printRoom(w)
	r.printMemory(w)
	r.printProof(w)
	r.printAccess(w)
	r.printEvents(w)
	if len(r.HTTPCeiling) == 0 { // -cpu-only, -durability-only
		if len(r.Drain) > 0 {
			r.printDrain(w)
		}
		return
	}
	r.printDrain(w)
	e := r.E2E
	fmt.Fprintf(w, "\nend to end: %d claims from %d users for %d units, %d connections\n", e.Claims, e.Users, e.Stock, e.Claim.Conns)
	fmt.Fprintf(w, "  claims/s %.0f, p50 %s, p99 %s, p99.9 %s; admitted %d\n", e.Claim.RPS, us(e.Claim.P50us), us(e.Claim.P99us), us(e.Claim.P999us), e.Admitted)
	fmt.Fprintf(w, "  last 202 at %s, last order in MySQL at %s (%s after the last 202); largest stream backlog %d\n",
		e.LastAdmit.Round(time.Millisecond), e.LastPersisted.Round(time.Millisecond), e.PersistLag.Round(time.Millisecond), e.MaxBacklog)
	if len(e.Violations) == 0 {
		fmt.Fprintln(w, "  invariants: all hold")
	} else {
		fmt.Fprintln(w, "  invariants VIOLATED: "+strings.Join(e.Violations, "; "))
	}
	fmt.Fprintf(w, "\npeak RSS: gateway %.0f MB, worker %.0f MB\n", float64(r.GatewayRSS)/1e6, float64(r.WorkerRSS)/1e6)
}

func answers(m Measure) string {
	var parts []string
	for _, k := range []string{"202", "409", "429", "503"} {
		if n := m.Status[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s:%d", k, n))
		}
	}
	if m.Errors > 0 {
		parts = append(parts, fmt.Sprintf("errors:%d", m.Errors))
	}
	return strings.Join(parts, " ")
}

// printCPU writes the CPU-per-claim rows and the scale-out run.
func (r *Report) printCPU(w io.Writer) {
	if len(r.CPU) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
		fmt.Fprintln(tw, "CPU per request	per second	server µs/req	vs bare handler	redis µs/req	claims a call	p99	answers	")
		for _, m := range r.CPU {
			vs, redis, server, p99, perCall := "-", "-", "-", "-", "-"
			if m.ClaimsPerCall > 0 {
				perCall = fmt.Sprintf("%.1f", m.ClaimsPerCall)
			}
			if m.P99us > 0 {
				p99 = us(int64(m.P99us))
			}
			if m.ProcessUs > 0 {
				server = fmt.Sprintf("%.1f", m.ProcessUs)
			}
			if m.VsBare > 0 {
				vs = fmt.Sprintf("%.2f ×", m.VsBare)
			}
			if m.RedisUs > 0 || m.VsBare > 0 || m.ProcessUs == 0 {
				redis = fmt.Sprintf("%.1f", m.RedisUs)
			}
			if m.RedisPersistUs > 0 {
				redis = fmt.Sprintf("%.1f admitting + %.1f persisting", m.RedisUs, m.RedisPersistUs)
			}
			fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t\n", m.Name, m.PerSecond, server, vs, redis, perCall, p99, answers(Measure{Status: m.Status}))
		}
		tw.Flush()
	}
	r.printBuyers(w)
	if o := r.OpenSale; o != nil {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "open-ended sale: %d claims from %d buyers in %.0f s, %d admitted, %d paid (the rest expired, their units bought again), 1 worker, a reaper\n", o.Claims, o.Buyers, o.Seconds, o.Admitted, o.Paid)
		fmt.Fprintf(w, "  Redis: %.1f bytes a buyer at the end (used_memory grown over the run), %+.0f bytes a minute over the second half: the voucher's hash %+.0f, its released set %+.0f (%d ids at the end)\n",
			o.BytesPerBuyer, o.GrowthPerMinute, o.HashGrowthPerMinute, o.ReleasedGrowthPerMinute, o.ReleasedIDs)
		fmt.Fprintf(w, "  sweeps every %.0f s: %d passes, %d indexes dropped, %.1f ms a pass (wall time: at most its Redis time), %.2f ms a second of the run\n", o.SweepInterval, o.Sweeps, o.IndexesDropped, o.SweepMsPerPass, o.SweepMsPerSec)
		var line []string
		for _, m := range o.Memory {
			line = append(line, fmt.Sprintf("%.0fs %.1f MB (hash %.1f, released %.1f)", m.At, float64(m.Bytes)/1e6, float64(m.Hash)/1e6, float64(m.Released)/1e6))
		}
		fmt.Fprintf(w, "  used_memory: %s\n", strings.Join(line, ", "))
		fmt.Fprintf(w, "  the sweep's commands (HSCAN; XRANGE, HGET, HDEL in pending.lua; HGET also in release.lua) by Redis's own clock: %.0f µs a second of the run (hscan %.0f, xrange %.0f, hget %.0f, hdel %.0f µs in all)\n",
			o.SweepCommandsUsPerSec, o.SweepCommands["hscan"], o.SweepCommands["xrange"], o.SweepCommands["hget"], o.SweepCommands["hdel"])
		keys := make([]string, 0, len(o.Keys))
		for k := range o.Keys {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %s: %d bytes\n", k, o.Keys[k])
		}
	}
	if fr := r.Freeze; fr != nil {
		fmt.Fprintln(w)
		for _, row := range []struct {
			what string
			f    *harness.FreezeReport
		}{
			{"claims through a 2 s Redis freeze (64 connections, one claim a user)", fr.Freeze},
			{"claims through a 2 s Redis freeze (64 connections, two claims a user at once, limit 1)", fr.Twice},
			{fmt.Sprintf("claims through a %s partition from Redis (64 connections, one claim a user, FLASHSALE_CLAIM_OUTCOME_TIMEOUT=%s)", partitionFor, partitionOutcome), fr.Partition},
		} {
			if f := row.f; f != nil {
				fmt.Fprintf(w, "%s: %d answered %v; outcome_unknown %d, resolved %d (%d admitted; asked one after another, %.1f s in all); misled %d\n",
					row.what, answeredCount(f.Answers), f.Answers, f.OutcomeUnknown, f.Resolved, f.ResolvedOrders, f.Elapsed, len(f.Misled))
			}
		}
		if fr.NoPartition != "" {
			fmt.Fprintf(w, "partition row not run: %s\n", fr.NoPartition)
		}
	}
	if sp := r.Split; sp != nil {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
		fmt.Fprintf(tw, "hot voucher split by itself (hot at %d/s, held at %d/s)\tbuckets\tadmissions/s\tmaster\tshare of script CPU\t\n", sp.HotSplitAt, sp.HeldAt)
		for _, so := range []ScaleOut{sp.Before, sp.After} {
			var total float64
			for _, m := range so.Masters {
				total += m.CPUSeconds
			}
			for i, m := range so.Masters {
				name, rate := "", ""
				if i == 0 {
					name, rate = map[bool]string{true: "before", false: "after"}[so.Buckets == 1], fmt.Sprintf("%.0f", so.PerSecond)
				}
				share := 0.0
				if total > 0 {
					share = 100 * m.CPUSeconds / total
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%.0f %%\t\n", name, so.Buckets, rate, m.Addr, share)
			}
		}
		tw.Flush()
		fmt.Fprintf(w, "hot to split done %.0f ms (the split itself %.0f ms, the moving buyers' pause %.1f ms, %d buyers in the bucket); p99 of a call of 32 claims %.1f ms before, %.1f ms during the split round (%d calls, the longest %.1f ms, begun %.0f ms into the round); %d admitted + %d left = %d\n",
			sp.HotToSplitMs, sp.SplitMs, sp.PauseMs, sp.BuyersAtSplit, sp.P99BeforeUs/1000, sp.P99DuringUs/1000, sp.Calls, sp.LongestUs/1000, sp.LongestAtMs, sp.Admitted, sp.Remaining, sp.Stock)
	}
	if len(r.ScaleOut) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
		fmt.Fprintln(tw, "hot voucher, 3-master cluster	admissions/s	master	admissions	CPU s	µs/admission	")
		for _, so := range r.ScaleOut {
			for i, m := range so.Masters {
				name, rate := "", ""
				if i == 0 {
					name, rate = fmt.Sprintf("stock_buckets=%d", so.Buckets), fmt.Sprintf("%.0f", so.PerSecond)
				}
				per := "-"
				if m.Admissions > 0 {
					per = fmt.Sprintf("%.1f", m.CPUus)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%.2f\t%s\t\n", name, rate, m.Addr, m.Admissions, m.CPUSeconds, per)
			}
		}
		tw.Flush()
	}
}

func (r *Report) printDrain(w io.Writer) {
	defer r.printRelay(w)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "worker drain\tworkers\tbatch\torders\tseconds\torders/s\tredis µs/order\t")
	for _, d := range r.Drain {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.2f\t%.0f\t%.1f\t\n", d.Name, d.Workers, d.BatchSize, d.Orders, d.Seconds, d.PerSecond, d.RedisUs)
	}
	tw.Flush()
}

func answeredCount(by map[string]int) int {
	n := 0
	for _, c := range by {
		n += c
	}
	return n
}

// printBuyers writes the buyers' rows and, when profiled, the account.
func (r *Report) printBuyers(w io.Writer) {
	b := r.Buyers
	if b == nil {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "buyers: %d distinct users, one claim each, closed loop, %d worker persisting; the bare handler answers as many requests in the same run\n", b.Users, b.Workers)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "conns\tserver\tper second\tp50\tp99\tCPU µs/req\tgoroutines scheduled/req (≈)\tcreated/req\tredis µs/claim\tclaims a call\tratios to the bare handler\t")
	for _, lv := range b.Levels {
		fmt.Fprintf(tw, "%d\tbare net/http handler\t%.0f\t%s\t%s\t%.1f\t%.1f\t%.2f\t-\t-\t\t\n", lv.Conns, lv.Bare.RPS, us(lv.Bare.P50us), us(lv.Bare.P99us), lv.Bare.CPUus, lv.Bare.Scheduled, lv.Bare.Created)
		g := lv.Gateway
		fmt.Fprintf(tw, "\tgateway\t%.0f\t%s\t%s\t%.1f\t%.1f\t%.2f\t%.1f\t%.1f\tCPU %.2f ×, redis %.2f ×, p99 %.2f ×, claims/s %.2f ×\t\n", g.RPS, us(g.P50us), us(g.P99us), g.CPUus, g.Scheduled, g.Created,
			lv.RedisUs, lv.ClaimsPerCall, g.CPUus/lv.Bare.CPUus, lv.RedisUs/lv.Bare.CPUus, float64(g.P99us)/float64(lv.Bare.P99us), g.RPS/lv.Bare.RPS)
	}
	tw.Flush()
	for _, lv := range b.Levels {
		// Redis counts the commands a script calls in their own rows as
		// well as in EVALSHA's: the script's row holds them, and the
		// top-level commands are EVALSHA and the workers' XREADGROUP.
		var inner []string
		var top float64
		for _, c := range lv.RedisCommands {
			switch c.Command {
			case "evalsha", "xreadgroup":
				top += c.Us
			default:
				inner = append(inner, fmt.Sprintf("%s %.2f", c.Command, c.Us))
			}
		}
		fmt.Fprintf(w, "  redis at %d conns, µs a claim by Redis's own clock in each command (which runs on while Redis waits for a core: it can exceed the CPU): scripts (EVALSHA: admit.lua, the workers' acknowledgements) %.2f, of which the commands they call %s; the workers' XREADGROUP %.2f; the process's CPU less these %.2f\n",
			lv.Conns, commandUs(lv.RedisCommands, "evalsha"), strings.Join(inner, ", "), commandUs(lv.RedisCommands, "xreadgroup"), lv.RedisUs-top)
	}
	if len(b.Levels) == 0 || len(b.Levels[0].Account) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	head := "a request's CPU by part, µs (CPU profiles, scaled to /proc)"
	for _, lv := range b.Levels {
		head += fmt.Sprintf("\tbare, %d conns\tgateway\tgateway - bare", lv.Conns)
	}
	fmt.Fprintln(tw, head+"\t")
	for _, part := range append(parts, "total", "profiled") {
		line, seen := part, false
		if part == "profiled" {
			line = "share of the CPU the samples saw"
			for _, lv := range b.Levels {
				line += fmt.Sprintf("\t%.0f %%\t%.0f %%\t", 100*lv.Bare.Profiled, 100*lv.Gateway.Profiled)
			}
			fmt.Fprintln(tw, line+"\t")
			continue
		}
		for _, lv := range b.Levels {
			var bu, gu float64
			for _, l := range lv.Account {
				if l.Part == part || part == "total" {
					bu, gu, seen = bu+l.BareUs, gu+l.GatewayUs, true
				}
			}
			line += fmt.Sprintf("\t%.2f\t%.2f\t%+.2f", bu, gu, gu-bu)
		}
		if seen {
			fmt.Fprintln(tw, line+"\t")
		}
	}
	tw.Flush()
}

func commandUs(cs []CommandCost, name string) float64 {
	for _, c := range cs {
		if c.Command == name {
			return c.Us
		}
	}
	return 0
}
