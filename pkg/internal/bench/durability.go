package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// DurabilityRun is the gateway's claims with one FLASHSALE_REDIS_DURABILITY,
// on a redis-server with one replica.
type DurabilityRun struct {
	Mode  string  `json:"mode"`
	Claim Measure `json:"claims"`
}

// WaitCost is one client's pipelines of Pipe admissions, one after the
// other, with and without a WAIT for one replica at the end of each: the
// admissions per second and the time of a flush.
type WaitCost struct {
	Pipe        int     `json:"pipeline"`
	NonePerSec  float64 `json:"none_per_s"`
	WaitPerSec  float64 `json:"replica_per_s"`
	NoneFlushUs float64 `json:"none_flush_us"`
	WaitFlushUs float64 `json:"replica_flush_us"`
}

// durabilityRuns measures the gateway's admitted claims with durability
// none and replica on a stack whose Redis has one replica, and what a
// WAIT costs a pipeline of 1, 8 and 32 admissions. tokens are signed with
// secret, which the stacks' gateways are given.
func durabilityRuns(ctx context.Context, cfg Config, secret string, tokens []string, rep *Report) error {
	for _, mode := range []string{rdb.DurabilityNone, rdb.DurabilityReplica} {
		s, err := harness.StartStack(ctx, harness.Options{Dir: cfg.Dir + "/durability-" + mode, Workers: 0, Partitions: 8, RedisReplica: true,
			Env: []string{"FLASHSALE_AUDIT_LOG=false", "FLASHSALE_LOG_LEVEL=warn", "FLASHSALE_CLAIM_TIMEOUT=2s", "FLASHSALE_REDIS_DURABILITY=" + mode,
				"FLASHSALE_JWT_SECRET=" + secret}})
		if err != nil {
			return err
		}
		err = func() error {
			defer s.Close()
			host := strings.TrimPrefix(s.URL, "http://")
			v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "durability", Stock: 10_000_000, PerUserLimit: 1})
			if err != nil {
				return err
			}
			path := "/v1/vouchers/" + strconv.FormatInt(v, 10) + "/orders"
			r := Drive(Load{Addr: host, Conns: cfg.Conns[0], Duration: cfg.Duration,
				Next: func(i int64) []byte { return Request(host, path, tokens[i%int64(len(tokens))]) }})
			m := measure("gateway claims, durability "+mode, "closed", cfg.Conns[0], 0, r)
			rep.Durability = append(rep.Durability, DurabilityRun{Mode: mode, Claim: m})
			cfg.logf("durability %s, %d conns: %.0f claims/s, p99 %s, status %v", mode, cfg.Conns[0], r.RPS(), us(m.P99us), r.Status)
			if mode != rdb.DurabilityReplica {
				return nil
			}
			// WAIT per flush, by pipeline size, from the store itself: one
			// client, so a flush's time is the round trip, not a queue.
			for _, pipe := range []int{1, 8, 32, 128} {
				c := WaitCost{Pipe: pipe}
				for _, d := range []rdb.Durability{{Mode: rdb.DurabilityNone}, {Mode: rdb.DurabilityReplica, MinReplicas: 1, Timeout: time.Second}} {
					store, err := rdb.New(s.RDB.Client(), 8, "")
					if err != nil {
						return err
					}
					if err := store.SetDurability(d); err != nil {
						return err
					}
					// A voucher of its own: the users of every run are b1, b2, ...
					v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "wait", Stock: 10_000_000, PerUserLimit: 1})
					if err != nil {
						return err
					}
					_, perSec := driveAdmissions(ctx, store, v, 1, pipe, cfg.Duration/2, nil)
					flushUs := 0.0
					if perSec > 0 {
						flushUs = float64(pipe) / perSec * 1e6
					}
					if d.Mode == rdb.DurabilityNone {
						c.NonePerSec, c.NoneFlushUs = perSec, flushUs
					} else {
						c.WaitPerSec, c.WaitFlushUs = perSec, flushUs
					}
					if err := resetStreams(ctx, s); err != nil {
						return err
					}
				}
				rep.WaitCost = append(rep.WaitCost, c)
				cfg.logf("WAIT, one client, pipelines of %d: %.0f admissions/s without, %.0f with; a flush %.0f µs without, %.0f µs with",
					pipe, c.NonePerSec, c.WaitPerSec, c.NoneFlushUs, c.WaitFlushUs)
			}
			return nil
		}()
		if err != nil {
			return fmt.Errorf("durability %s: %w", mode, err)
		}
	}
	return nil
}

func (r *Report) printDurability(w io.Writer) {
	if len(r.Durability) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "durability, redis-server with 1 replica\tconns\tclaims/s\tp50\tp99\tvs none\t")
	var none Measure
	for _, d := range r.Durability {
		if d.Mode == rdb.DurabilityNone {
			none = d.Claim
		}
		vs := "-"
		if d.Mode != rdb.DurabilityNone && none.RPS > 0 {
			vs = fmt.Sprintf("%.0f %% of the claims/s, p99 %+.2f ms", 100*d.Claim.RPS/none.RPS, float64(d.Claim.P99us-none.P99us)/1000)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t\n", d.Claim.Name, d.Claim.Conns, d.Claim.RPS, us(d.Claim.P50us), us(d.Claim.P99us), vs)
	}
	tw.Flush()
	if len(r.WaitCost) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "WAIT per flush, one client (the store alone)\tnone adm/s\treplica adm/s\tnone µs/flush\treplica µs/flush\tWAIT µs/flush\t")
	for _, c := range r.WaitCost {
		fmt.Fprintf(tw, "pipelines of %d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t\n", c.Pipe, c.NonePerSec, c.WaitPerSec, c.NoneFlushUs, c.WaitFlushUs, c.WaitFlushUs-c.NoneFlushUs)
	}
	tw.Flush()
}
