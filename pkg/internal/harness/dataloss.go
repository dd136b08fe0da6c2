package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/reaper"
)

// DataLossReport is what a Redis that lost its last writes did to a sale,
// and what reconcile --repair made of it.
type DataLossReport struct {
	StockTotal     int64
	AOFBytesCut    int64
	Sale1, Sale2   *SaleResult
	LostAdmissions int64 // 202s whose order never reached MySQL
	FailedOrders   map[string]int64
	// Before the repair.
	RedisBefore, MySQLBefore int64
	DiffsBefore              int
	ReconcileOutput          string
	// After the repair and a second sale.
	RedisAfter, MySQLAfter int64
	DiffsAfter             int
	Live                   int64
	UsersOverLimit         int64
}

// RunDataLoss runs a sale on a Redis with appendfsync everysec, crashes it
// in the middle the way a machine crash would (kill -9, then the AOF's last
// bytes, those not yet fsynced, are gone), lets the sale finish, then runs
// "reaper reconcile" and "reaper reconcile --repair" and sells again.
func RunDataLoss(ctx context.Context, dir string, cutBytes int64, log io.Writer) (*DataLossReport, error) {
	s, err := StartStack(ctx, Options{Dir: dir, Workers: 2, Partitions: 4, Reaper: true,
		RedisArgs: []string{"--appendonly", "yes", "--appendfsync", "everysec"},
		Env:       []string{"FLASHSALE_TAKEOVER_MIN_IDLE=1s", "FLASHSALE_WORKER_BLOCK=200ms", "FLASHSALE_REAPER_INTERVAL=300ms"}})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	const stock = 2000
	v, err := s.CreateVoucher(ctx, VoucherSpec{Name: "dataloss", Stock: stock, PerUserLimit: 1, PaymentTimeoutSeconds: 3600})
	if err != nil {
		return nil, err
	}
	rep := &DataLossReport{StockTotal: stock, FailedOrders: map[string]int64{}}
	crashed := make(chan error, 1)
	go func() {
		// Redis dies mid-sale once the workers persist orders as they come
		// (some persisted, few waiting): the AOF tail not yet fsynced then
		// holds admissions MySQL has, whatever the machine's load.
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			var persisted int64
			_ = s.DB.DB().WithContext(ctx).Raw("SELECT COUNT(*) FROM orders WHERE voucher_id = ?", v).Scan(&persisted).Error
			waiting := int64(-1)
			if bs, err := s.RDB.VoucherBacklog(ctx, v); err == nil {
				waiting = 0
				for _, b := range bs {
					waiting += b.Orders
				}
			}
			if persisted >= 300 && waiting >= 0 && waiting <= 100 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		crashed <- func() error {
			if err := s.Redis.Kill(); err != nil {
				return err
			}
			n, err := cutAOF(filepath.Join(dir, "redis"), cutBytes)
			rep.AOFBytesCut = n
			if err != nil {
				return err
			}
			fmt.Fprintf(log, "redis-server killed; the last %d bytes of its AOF (not yet fsynced) are gone\n", n)
			return s.Redis.Start()
		}()
	}()
	if rep.Sale1, err = s.RunSale(ctx, SaleConfig{VoucherID: v, Users: 6000, Duration: 3 * time.Second, Rate: 1000, Concurrency: 16, Seed: 1}); err != nil {
		return nil, err
	}
	if err := <-crashed; err != nil {
		return nil, err
	}
	if err := waitDrained(ctx, s, time.Minute); err != nil {
		return nil, err
	}
	var rows []struct {
		ID     int64
		Status string
		Reason string
	}
	if err := s.DB.DB().WithContext(ctx).Raw("SELECT id, status, reason FROM orders WHERE voucher_id = ?", v).Scan(&rows).Error; err != nil {
		return nil, err
	}
	inDB := map[int64]bool{}
	for _, r := range rows {
		inDB[r.ID] = true
		if r.Status == string(order.StatusFailed) {
			rep.FailedOrders[r.Reason]++
		}
	}
	for id := range rep.Sale1.Orders {
		if !inDB[id] {
			rep.LostAdmissions++
		}
	}
	if rep.RedisBefore, rep.MySQLBefore, rep.DiffsBefore, err = s.reconcileState(ctx, v); err != nil {
		return nil, err
	}
	out, _ := s.RunOutput(ctx, "reaper", "reconcile") // exits 1 when Redis differs
	repair, err := s.RunOutput(ctx, "reaper", "reconcile", "--repair")
	if err != nil {
		return nil, fmt.Errorf("reconcile --repair: %w\n%s", err, repair)
	}
	rep.ReconcileOutput = "$ reaper reconcile\n" + out + "\n$ reaper reconcile --repair\n" + repair

	// Sell what is left, then check both stores again.
	if rep.Sale2, err = s.RunSale(ctx, SaleConfig{VoucherID: v, Users: 3000, Requests: 6000, Concurrency: 16, Seed: 2}); err != nil {
		return nil, err
	}
	if err := waitDrained(ctx, s, time.Minute); err != nil {
		return nil, err
	}
	if rep.RedisAfter, rep.MySQLAfter, rep.DiffsAfter, err = s.reconcileState(ctx, v); err != nil {
		return nil, err
	}
	if err := s.DB.DB().WithContext(ctx).Raw("SELECT COUNT(*) FROM orders WHERE voucher_id = ? AND status IN ('created','paid')", v).Scan(&rep.Live).Error; err != nil {
		return nil, err
	}
	err = s.DB.DB().WithContext(ctx).Raw(`SELECT COUNT(*) FROM (SELECT user_id FROM orders WHERE voucher_id = ? AND status IN ('created','paid')
		GROUP BY user_id HAVING COUNT(*) > 1) t`, v).Scan(&rep.UsersOverLimit).Error
	return rep, err
}

// cutAOF truncates the newest incremental AOF file in dir by up to n bytes.
func cutAOF(dir string, n int64) (int64, error) {
	files, err := filepath.Glob(filepath.Join(dir, "appendonlydir", "*.incr.aof"))
	if err != nil || len(files) == 0 {
		return 0, fmt.Errorf("no incremental AOF in %s: %v", dir, err)
	}
	last := files[len(files)-1]
	fi, err := os.Stat(last)
	if err != nil {
		return 0, err
	}
	n = min(n, fi.Size()/2)
	return n, os.Truncate(last, fi.Size()-n)
}

// waitDrained waits until every partition's stream is empty with nothing pending.
func waitDrained(ctx context.Context, s *Stack, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if drained, _ := s.Drained(ctx); drained {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("streams not drained after %s", timeout)
}

func (s *Stack) reconcileState(ctx context.Context, v int64) (redis, mysql int64, diffs int, err error) {
	if redis, _, err = s.RDB.RemainingStock(ctx, v); err != nil {
		return
	}
	vo, err := s.DB.Voucher(ctx, v)
	if err != nil {
		return
	}
	checks, err := reaper.Reconcile(ctx, s.RDB, s.DB, time.Now(), false)
	for _, c := range checks {
		diffs += len(c.Differences)
	}
	return redis, vo.Stock, diffs, err
}

// RunOutput runs one of the stack's binaries with args and returns its stdout.
func (s *Stack) RunOutput(ctx context.Context, bin string, args ...string) (string, error) {
	return s.RunOutputEnv(ctx, nil, bin, args...)
}

// RunOutputEnv is RunOutput with env added to the stack's environment. The
// binary talks to the gateway at FLASHSALE_SMOKE_URL.
func (s *Stack) RunOutputEnv(ctx context.Context, env []string, bin string, args ...string) (string, error) {
	cmd := s.Command(ctx, bin, args...)
	cmd.Env = append(cmd.Env, env...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	err := cmd.Run()
	return stdout.String(), err
}

// Command is bin with args and the stack's environment (the gateway at
// FLASHSALE_SMOKE_URL), not started: RunOutputEnv runs one, and a caller
// that wants the process's own figures (its memory) starts one itself.
func (s *Stack) Command(ctx context.Context, bin string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, s.binary(bin), args...)
	cmd.Env = append(append(cleanEnv(), s.env...), "FLASHSALE_SMOKE_URL="+s.URL)
	return cmd
}

// Print writes the report.
func (r *DataLossReport) Print(w io.Writer) {
	fmt.Fprintf(w, "stock total                          %d\n", r.StockTotal)
	fmt.Fprintf(w, "sale 1 (Redis crashed during it)     %d claims, %d admitted, %d answered 503\n", r.Sale1.Requests, r.Sale1.Admitted, r.Sale1.Unavailable)
	fmt.Fprintf(w, "AOF bytes lost                       %d\n", r.AOFBytesCut)
	fmt.Fprintf(w, "202s never persisted (lost)          %d\n", r.LostAdmissions)
	fmt.Fprintf(w, "orders failed in MySQL, by reason    %v\n", r.FailedOrders)
	fmt.Fprintf(w, "before repair: remaining Redis/MySQL %d / %d, reconcile differences %d\n", r.RedisBefore, r.MySQLBefore, r.DiffsBefore)
	fmt.Fprintf(w, "sale 2 (after repair)                %d claims, %d admitted\n", r.Sale2.Requests, r.Sale2.Admitted)
	fmt.Fprintf(w, "after: remaining Redis/MySQL         %d / %d, reconcile differences %d\n", r.RedisAfter, r.MySQLAfter, r.DiffsAfter)
	fmt.Fprintf(w, "live orders / stock total            %d / %d\n", r.Live, r.StockTotal)
	fmt.Fprintf(w, "users over the limit                 %d\n", r.UsersOverLimit)
}
