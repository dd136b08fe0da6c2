package bench

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/internal/wait"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
)

// drain measures how fast workers persist a pre-filled stream: the
// workers start and connect, are stopped (SIGSTOP) while the stream is
// filled with orders of one voucher, and the clock runs from SIGCONT until
// the last order is in MySQL.
// A voucher of stock buckets > 1 spreads the orders over that many
// partitions (and, on a cluster, masters).
func drain(ctx context.Context, s *harness.Stack, kind string, buckets, workers, batch, orders int, profilePath string) (Drain, int64, error) {
	d := Drain{Workers: workers, BatchSize: batch, Orders: orders}
	vs := spec("drain", kind, int64(orders))
	vs.StockBuckets = buckets
	v, err := s.CreateVoucher(ctx, vs)
	if err != nil {
		return d, 0, err
	}
	if err := inRedis(ctx, s, v); err != nil {
		return d, 0, err
	}
	var procs []*harness.Proc
	defer func() {
		for _, p := range procs {
			_ = p.Signal(syscall.SIGCONT)
			_ = p.Stop(30 * time.Second)
		}
	}()
	for i := range workers {
		p, err := s.StartWorkerWith(fmt.Sprintf("drain-%d-%d-%d", v, batch, i), "FLASHSALE_WORKER_BATCH_SIZE="+strconv.Itoa(batch))
		if err != nil {
			return d, 0, err
		}
		procs = append(procs, p)
		if err := waitReady(p); err != nil {
			return d, 0, err
		}
	}
	for _, p := range procs {
		if err := p.Signal(syscall.SIGSTOP); err != nil {
			return d, 0, err
		}
	}
	if err := prefill(ctx, s, v, orders); err != nil {
		return d, 0, err
	}
	redisBefore, err := stackRedisCPU(ctx, s)
	if err != nil {
		return d, 0, err
	}
	start := time.Now()
	for _, p := range procs {
		if err := p.Signal(syscall.SIGCONT); err != nil {
			return d, 0, err
		}
	}
	if profilePath != "" {
		prof := profile(procs[0].PprofURL, time.Second, profilePath)
		defer func() { <-prof }()
	}
	deadline := start.Add(10 * time.Minute)
	for {
		var n int64
		if err := s.DB.DB().WithContext(ctx).Raw("SELECT COUNT(*) FROM orders WHERE voucher_id = ?", v).Scan(&n).Error; err != nil {
			return d, 0, err
		}
		if n >= int64(orders) {
			break
		}
		if time.Now().After(deadline) {
			return d, 0, fmt.Errorf("drain: %d of %d orders after 10 minutes", n, orders)
		}
		time.Sleep(5 * time.Millisecond)
	}
	d.Seconds = time.Since(start).Seconds()
	d.PerSecond = float64(orders) / d.Seconds
	redisAfter, err := stackRedisCPU(ctx, s)
	if err != nil {
		return d, 0, err
	}
	d.RedisUs = float64((redisAfter - redisBefore).Microseconds()) / float64(orders)
	var rss int64
	for _, p := range procs {
		r, err := PeakRSS(p.Pid())
		if err != nil {
			return d, 0, err
		}
		rss = max(rss, r)
	}
	return d, rss, nil
}

// inRedis waits until voucher v, just created, is in Redis: a gateway
// that could not write it there at once (MySQL or Redis slow after the
// run before) answers 201 and leaves its creation to the reaper.
func inRedis(ctx context.Context, s *harness.Stack, v int64) error {
	return wait.Until(ctx, 30*time.Second, fmt.Sprintf("voucher %d in Redis", v), func() (bool, string) {
		_, found, err := s.RDB.RemainingStock(ctx, v)
		return err == nil && found, fmt.Sprint("found ", found, ", ", err)
	})
}

// spec is a voucher of kind with n units or envelopes, one per user.
func spec(name, kind string, n int64) harness.VoucherSpec {
	if kind == "envelope" {
		return harness.VoucherSpec{Name: name, Kind: kind, Count: n, TotalAmount: 100 * n, PerUserLimit: 1}
	}
	return harness.VoucherSpec{Name: name, Stock: n, PerUserLimit: 1}
}

// waitReady waits until a process's /readyz answers 200.
func waitReady(p *harness.Proc) error {
	return wait.Until(context.Background(), 30*time.Second, p.Name+" ready", func() (bool, string) {
		res, err := http.Get(p.OpsURL + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK, res.Status
	})
}

// prefill admits n orders of voucher v by distinct users, pipelined.
func prefill(ctx context.Context, s *harness.Stack, v int64, n int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	now := time.Now()
	day := order.Day(now, time.UTC)
	adm := admission.New(s.RDB, nil)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				from := next.Add(256) - 256
				if from >= int64(n) {
					return
				}
				var claims []admission.Claim
				for i := from; i < min(from+256, int64(n)); i++ {
					claims = append(claims, admission.Claim{VoucherID: v, UserID: "d" + strconv.FormatInt(i, 10), Now: now, Day: day})
				}
				_, errs, err := adm.AdmitMany(ctx, claims)
				if err == nil {
					for _, e := range errs {
						if e != nil {
							err = e
							break
						}
					}
				}
				if err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-errc:
		return fmt.Errorf("prefill: %w", err)
	default:
		return nil
	}
}

// stackRedisCPU is the CPU time the stack's Redis has used: the server's,
// or every master's of a cluster.
func stackRedisCPU(ctx context.Context, s *harness.Stack) (time.Duration, error) {
	if s.Cluster == nil {
		return redisCPU(ctx, s.RDB.Client().(*redis.Client))
	}
	var mu sync.Mutex
	var total time.Duration
	err := s.Cluster.Client().ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		d, err := redisCPU(ctx, c)
		mu.Lock()
		total += d
		mu.Unlock()
		return err
	})
	return total, err
}
