package bench

// A sale without an end, run for a while: what it leaves in Redis. Claims
// at a steady rate from a set of buyers (each claims twice, the limit),
// two fifths of the orders paid, the rest left to expire (their units come
// back and are bought again), one worker persisting and a reaper; the
// bench itself is the sweeper (upkeep.Indexes.Sweep every interval, the
// reaper's own set beyond the run) so that each pass can be timed. Redis's
// used_memory is read each tenth of the run: bytes a buyer at the end, and
// the growth a minute over the run's second half.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/upkeep"
)

// OpenSaleRun is the open-ended sale's row.
type OpenSaleRun struct {
	Seconds  float64 `json:"seconds"`
	Claims   int64   `json:"claims"`
	Buyers   int     `json:"buyers"`
	Admitted int64   `json:"admitted"`
	Paid     int64   `json:"paid"`
	// Memory is used_memory at each tenth of the run (the first before
	// any claim).
	Memory []MemorySample `json:"used_memory"`
	// BytesPerBuyer: used_memory grown over the run, over the buyers.
	BytesPerBuyer float64 `json:"bytes_per_buyer"`
	// GrowthPerMinute: used_memory's growth a minute over the second half;
	// HashGrowthPerMinute and ReleasedGrowthPerMinute, that of the
	// voucher's hash (the buyers' counts) and of its released set.
	GrowthPerMinute         float64 `json:"growth_bytes_per_minute_second_half"`
	HashGrowthPerMinute     float64 `json:"hash_growth_bytes_per_minute_second_half"`
	ReleasedGrowthPerMinute float64 `json:"released_growth_bytes_per_minute_second_half"`
	// ReleasedIDs: the ids in the released set at the end.
	ReleasedIDs int64 `json:"released_ids"`
	// Sweeps: the passes, their indexes dropped, and their wall time (an
	// upper bound of their Redis time) a second of the run.
	SweepInterval  float64 `json:"sweep_interval_s"`
	Sweeps         int     `json:"sweeps"`
	IndexesDropped int     `json:"indexes_dropped"`
	SweepMsPerPass float64 `json:"sweep_ms_per_pass"`
	SweepMsPerSec  float64 `json:"sweep_ms_per_second"`
	// SweepCommandsUsPerSec: Redis's own time in the commands only the
	// sweep sends here (HSCAN, and XRANGE, HGET, HDEL inside pending.lua),
	// a second of the run.
	SweepCommandsUsPerSec float64            `json:"sweep_commands_us_per_second"`
	SweepCommandsUs       float64            `json:"sweep_commands_us"`
	SweepCommands         map[string]float64 `json:"sweep_commands_us_by_command"`
	// Keys: the bytes of each of the voucher's keys at the end (MEMORY
	// USAGE), and of its partition's stream.
	Keys map[string]int64 `json:"keys"`
}

// MemorySample is used_memory at a time of the run, and the bytes of the
// voucher's hash and of its released set (MEMORY USAGE, every field).
type MemorySample struct {
	At       float64 `json:"at_s"`
	Bytes    int64   `json:"bytes"`
	Hash     int64   `json:"voucher_hash_bytes"`
	Released int64   `json:"released_bytes"`
}

// openSale runs the open-ended sale on a stack of its own.
func openSale(ctx context.Context, cfg Config) (*OpenSaleRun, error) {
	sweepEvery := max(cfg.OpenSale/10, time.Second)
	s, err := harness.StartStack(ctx, harness.Options{Dir: cfg.Dir, Workers: 1, Reaper: true, Partitions: 8,
		Env: append([]string{"FLASHSALE_AUDIT_LOG=false", "FLASHSALE_LOG_LEVEL=warn", "FLASHSALE_REDIS_SWEEP_INTERVAL=24h",
			"FLASHSALE_REAPER_EXPIRE_INTERVAL=1s", "FLASHSALE_REAPER_RELEASE_INTERVAL=1s"}, cfg.Env...)})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	rc, _ := s.RDB.Client().(*redis.Client)
	if rc == nil {
		return nil, fmt.Errorf("the open sale needs a single redis-server")
	}
	host := strings.TrimPrefix(s.URL, "http://")
	cfg.logf("open sale: signing %d tokens", cfg.OpenBuyers)
	tokens := make([]string, cfg.OpenBuyers)
	for i := range tokens {
		tokens[i] = s.Token("open-" + strconv.Itoa(i))
	}
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "open-ended", Stock: int64(cfg.OpenClaims) * 2, PerUserLimit: 2, PaymentTimeoutSeconds: 20})
	if err != nil {
		return nil, err
	}
	out := &OpenSaleRun{Buyers: cfg.OpenBuyers, SweepInterval: sweepEvery.Seconds()}
	hashKey := s.RDB.VoucherKey(v)
	releasedKey := hashKey + ":released" // rdb keys.go
	m0, err := usedMemory(ctx, rc)
	if err != nil {
		return nil, err
	}
	out.Memory = append(out.Memory, MemorySample{At: 0, Bytes: m0})
	c0, err := commandStats(ctx, rc)
	if err != nil {
		return nil, err
	}

	// Two orders in five are paid, two seconds after their 202 (or once
	// persisted): the rest expire after 20 s and their units come back. A
	// payment answered order_pending (the worker has not persisted the
	// order yet) is tried again 250 ms later, queued behind the others
	// rather than holding its payer: payers that slept on their retries
	// fell behind the orders, which then expired unpaid.
	client := harness.NewClient(s.URL, 16)
	type toPay struct {
		id    int64
		token string
		at    time.Time
		tries int
	}
	pays := make(chan toPay, 1<<20)
	var paid atomic.Int64
	var owed sync.WaitGroup // payments queued, or waiting to be tried again
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range pays {
				time.Sleep(time.Until(p.at))
				status, code, err := client.Pay(ctx, p.id, p.token)
				if err == nil && status == 200 {
					paid.Add(1)
				}
				if code == "order_pending" && p.tries < 40 {
					p.tries++
					p.at = time.Now().Add(250 * time.Millisecond)
					time.AfterFunc(250*time.Millisecond, func() { pays <- p })
					continue
				}
				owed.Done()
			}
		}()
	}

	stop := make(chan struct{})
	done := make(chan struct{})
	start := time.Now()
	indexes := upkeep.NewIndexes(s.RDB)
	go func() { // each tenth: used_memory; every sweepEvery: a sweep pass, timed
		defer close(done)
		tick := time.NewTicker(sweepEvery)
		defer tick.Stop()
		var spent time.Duration
		for {
			select {
			case <-stop:
				if out.Sweeps > 0 {
					out.SweepMsPerPass = float64(spent.Microseconds()) / 1000 / float64(out.Sweeps)
					out.SweepMsPerSec = float64(spent.Microseconds()) / 1000 / time.Since(start).Seconds()
				}
				return
			case <-tick.C:
			}
			t0 := time.Now()
			n, err := indexes.Sweep(ctx, v)
			spent += time.Since(t0)
			if err != nil {
				cfg.logf("open sale: sweep: %v", err)
				continue
			}
			out.Sweeps++
			out.IndexesDropped += n
			m, err := usedMemory(ctx, rc)
			if err == nil {
				sample := MemorySample{At: time.Since(start).Seconds(), Bytes: m,
					Hash: keyBytes(ctx, rc, hashKey), Released: keyBytes(ctx, rc, releasedKey)}
				out.Memory = append(out.Memory, sample)
				cfg.logf("open sale at %s: used_memory %d bytes (the voucher's hash %d, its released set %d); the pass dropped %d indexes in %s",
					time.Since(start).Round(time.Second), m, sample.Hash, sample.Released, n, time.Since(t0).Round(time.Millisecond))
			}
		}
	}()
	path := "/v1/vouchers/" + strconv.FormatInt(v, 10) + "/orders"
	rate := max(1, int(float64(cfg.OpenClaims)/cfg.OpenSale.Seconds()))
	r := Drive(Load{Addr: host, Conns: 32, Duration: cfg.OpenSale, Rate: rate, MaxRequests: int64(cfg.OpenClaims),
		Next: func(i int64) []byte { return Request(host, path, tokens[i%int64(len(tokens))]) },
		OnResponse: func(i int64, status int, body []byte) {
			if status != 202 || i%5 >= 2 {
				return
			}
			id, err := orderIDOf(body)
			if err != nil {
				return
			}
			owed.Add(1)
			select {
			case pays <- toPay{id: id, token: tokens[i%int64(len(tokens))], at: time.Now().Add(2 * time.Second)}:
			default: // the payers are behind: this one expires instead
				owed.Done()
			}
		}})
	close(stop)
	<-done
	owed.Wait()
	close(pays)
	wg.Wait()
	out.Seconds, out.Claims, out.Admitted, out.Paid = r.Duration.Seconds(), r.Requests, r.Status[202], paid.Load()
	c1, err := commandStats(ctx, rc)
	if err != nil {
		return nil, err
	}
	out.SweepCommands = map[string]float64{}
	for _, c := range []string{"hscan", "xrange", "hget", "hdel"} {
		out.SweepCommands[c] = c1[c][1] - c0[c][1]
		out.SweepCommandsUs += out.SweepCommands[c]
	}
	out.SweepCommandsUsPerSec = out.SweepCommandsUs / time.Since(start).Seconds()
	out.Keys = map[string]int64{}
	keys, err := rc.Keys(ctx, fmt.Sprintf("flashsale:{p*}:v:%d*", v)).Result()
	if err != nil {
		return nil, err
	}
	keys = append(keys, rdb.StreamKey(s.RDB.PartitionOf(v)))
	for _, k := range keys {
		out.Keys[k] = keyBytes(ctx, rc, k)
	}
	if out.ReleasedIDs, err = rc.SCard(ctx, releasedKey).Result(); err != nil {
		return nil, err
	}
	last := out.Memory[len(out.Memory)-1]
	out.BytesPerBuyer = float64(last.Bytes-m0) / float64(cfg.OpenBuyers)
	for _, m := range out.Memory {
		if m.At >= last.At/2 {
			if minutes := (last.At - m.At) / 60; minutes > 0 {
				out.GrowthPerMinute = float64(last.Bytes-m.Bytes) / minutes
				out.HashGrowthPerMinute = float64(last.Hash-m.Hash) / minutes
				out.ReleasedGrowthPerMinute = float64(last.Released-m.Released) / minutes
			}
			break
		}
	}
	cfg.logf("open sale: %d claims in %.0f s (%v), %d paid; %.1f bytes a buyer, %+.0f bytes a minute over the second half; %d sweeps, %.1f ms a pass",
		out.Claims, out.Seconds, r.Status, out.Paid, out.BytesPerBuyer, out.GrowthPerMinute, out.Sweeps, out.SweepMsPerPass)
	return out, nil
}

// keyBytes is key's MEMORY USAGE, every element counted (0 when it is
// gone or the call fails: a sample, not a check).
func keyBytes(ctx context.Context, rc *redis.Client, key string) int64 {
	n, err := rc.MemoryUsage(ctx, key, 0).Result()
	if err != nil {
		return 0
	}
	return n
}

// orderIDOf reads a 202's order id.
func orderIDOf(body []byte) (int64, error) {
	var a struct {
		OrderID string `json:"order_id"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		return 0, err
	}
	return strconv.ParseInt(a.OrderID, 10, 64)
}
