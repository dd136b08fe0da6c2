package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/order"
)

// tailRuns measures a sold-out tail beside another sale, through the
// gateway, with the voucher's stock in one bucket and then in two: the
// voucher sells out, units trickle back (100 a second, as expiries give
// them), claims keep coming at it from half the connections, and another
// voucher's claims come in open loop at a fixed rate from the other half.
// The rows: the other voucher's answers (their p99, and any 5xx) and the
// tail's. The soak that asked for it had a two-bucket tail time out other
// vouchers' claims for minutes.
func tailRuns(ctx context.Context, s *harness.Stack, cfg Config, tokens []string, host string, rep *Report) error {
	const stock, trickle, otherRate = 2000, 100, 2000
	conns := max(cfg.Conns[0]/2, 1)
	claim := func(v int64, offset int64) func(int64) []byte {
		path := "/v1/vouchers/" + strconv.FormatInt(v, 10) + "/orders"
		return func(i int64) []byte { return Request(host, path, tokens[(offset+i)%int64(len(tokens))]) }
	}
	for _, buckets := range []int{1, 2} {
		tail, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "tail", Stock: stock, PerUserLimit: 1, StockBuckets: buckets})
		if err != nil {
			return err
		}
		other, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "other", Stock: 10_000_000, PerUserLimit: 1})
		if err != nil {
			return err
		}
		// Sold out first: every unit taken.
		sold := Drive(Load{Addr: host, Conns: cfg.Conns[0], Duration: time.Minute, MaxRequests: stock * 2, Next: claim(tail, 0)})
		if sold.Status[202] != stock {
			return fmt.Errorf("tail, %d buckets: %d admitted of %d", buckets, sold.Status[202], stock)
		}
		// Units trickle back, as expired orders give them.
		tctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		given := 0
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second / trickle)
			defer tick.Stop()
			day := order.Day(time.Now(), time.UTC)
			for i := int64(1); ; i++ {
				select {
				case <-tctx.Done():
					return
				case <-tick.C:
				}
				o := order.Order{ID: 1<<50 + i, VoucherID: tail, UserID: "expired-" + strconv.FormatInt(i, 10), Quantity: 1, Day: day}
				if ok, err := s.RDB.Release(tctx, o, time.Now()); err == nil && ok {
					given++
				}
			}
		}()
		var tailRes *Result
		wg.Add(1)
		go func() {
			defer wg.Done()
			tailRes = Drive(Load{Addr: host, Conns: conns, Duration: cfg.Duration, Next: claim(tail, stock*2)})
		}()
		otherRes := Drive(Load{Addr: host, Conns: conns, Duration: cfg.Duration, Rate: otherRate, Next: claim(other, stock*4)})
		stop()
		wg.Wait()
		name := fmt.Sprintf("sold-out tail, stock_buckets=%d, units back %d/s", buckets, trickle)
		rep.Gateway = append(rep.Gateway, measure(name+": its claims", "closed", conns, 0, tailRes),
			measure(name+": another voucher's claims", "open", conns, otherRate, otherRes))
		cfg.logf("%s: its claims %.0f/s, p99 %s, status %v; another voucher's at %d/s: p99 %s, status %v; %d units given back",
			name, tailRes.RPS(), us(tailRes.Latency.ValueAtQuantile(99)), tailRes.Status, otherRate,
			us(otherRes.Latency.ValueAtQuantile(99)), otherRes.Status, given)
		if err := resetStreams(ctx, s); err != nil {
			return err
		}
	}
	return nil
}
