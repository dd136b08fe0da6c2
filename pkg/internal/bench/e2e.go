package bench

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/flashsale/flashsale/pkg/internal/harness"
)

// endToEnd sells cfg.E2EStock units to cfg.E2EUsers users with cfg.E2EClaims
// claims as fast as cfg.Conns[0] connections go, two workers persisting,
// and checks the invariants afterwards.
func endToEnd(ctx context.Context, s *harness.Stack, cfg Config, tokens []string, host string) (E2E, error) {
	e := E2E{Claims: cfg.E2EClaims, Users: cfg.E2EUsers, Stock: cfg.E2EStock}
	for i := range 2 {
		p, err := s.StartWorkerWith("e2e-" + strconv.Itoa(i))
		if err != nil {
			return e, err
		}
		defer p.Stop(30 * time.Second) //nolint:errcheck
	}
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "end to end", Stock: int64(cfg.E2EStock), PerUserLimit: 1})
	if err != nil {
		return e, err
	}
	watch := s.WatchPersisted(ctx, v)
	sale := &harness.SaleResult{Rejected: map[string]int64{}, Orders: map[int64]string{}}
	var mu sync.Mutex
	path := "/v1/vouchers/" + strconv.FormatInt(v, 10) + "/orders"
	users := int64(cfg.E2EUsers)

	// The stream's backlog, sampled with the throughput windows.
	stopSampling := make(chan struct{})
	sampled := make(chan []int64, 1)
	go func() {
		var out []int64
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopSampling:
				sampled <- out
				return
			case <-t.C:
				var total int64
				for p := range s.RDB.Partitions() {
					b, err := s.RDB.PartitionBacklog(ctx, p)
					if err == nil {
						total += b.Length
					}
				}
				out = append(out, total)
			}
		}
	}()

	start := time.Now()
	r := Drive(Load{Addr: host, Conns: cfg.Conns[0], Duration: time.Hour, MaxRequests: int64(cfg.E2EClaims), Window: time.Second,
		Next: func(i int64) []byte { return Request(host, path, tokens[i%users]) },
		OnResponse: func(i int64, status int, body []byte) {
			mu.Lock()
			defer mu.Unlock()
			if status != 202 {
				var b struct{ Error string }
				_ = json.Unmarshal(body, &b)
				sale.Rejected[b.Error]++
				if status >= 500 {
					sale.Errors++
				}
				return
			}
			var b struct {
				OrderID string `json:"order_id"`
			}
			if json.Unmarshal(body, &b) != nil {
				sale.Errors++
				return
			}
			id, err := strconv.ParseInt(b.OrderID, 10, 64)
			if err != nil {
				sale.Errors++
				return
			}
			sale.Orders[id] = "u" + strconv.FormatInt(i%users, 10)
			sale.Admitted++
			sale.LastAdmit = time.Now()
		}})
	sale.Requests, sale.Duration, sale.Latency = r.Requests, r.Duration, r.Latency
	sale.Errors += r.Errors
	e.Claim = measure("end to end claims", "closed", cfg.Conns[0], 0, r)
	e.Windows = r.Windows
	e.Admitted = sale.Admitted
	e.LastAdmit = sale.LastAdmit.Sub(start)

	persistedAt, err := watch.Wait(ctx, sale.Admitted, 5*time.Minute)
	close(stopSampling)
	e.Backlog = <-sampled
	for _, b := range e.Backlog {
		e.MaxBacklog = max(e.MaxBacklog, b)
	}
	if err != nil {
		return e, err
	}
	e.LastPersisted = persistedAt.Sub(start)
	e.PersistLag = persistedAt.Sub(sale.LastAdmit)
	report, err := s.Check(ctx, v, sale)
	if err != nil {
		return e, err
	}
	e.Violations = report.Violations()
	return e, nil
}
