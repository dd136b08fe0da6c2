package harness_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/event"
	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testsink"
	"github.com/flashsale/flashsale/pkg/internal/wait"
)

func TestEndToEndSaleSurvivesAWorkerKill(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs the binaries")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := harness.StartStack(ctx, harness.Options{Dir: t.TempDir(), Workers: 2, Partitions: 4})
	require.NoError(t, err)
	stopped := false
	defer func() {
		if !stopped {
			_ = s.Close()
		}
	}()

	const stock = 500
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "e2e", Stock: stock, PerUserLimit: 1})
	require.NoError(t, err)

	// kill -9 worker 0 while orders are still being admitted, then restart it.
	killAt := make(chan struct{})
	var once sync.Once
	restarted := make(chan error, 1)
	go func() {
		select {
		case <-killAt:
			restarted <- s.RestartWorker(0)
		case <-ctx.Done():
			restarted <- ctx.Err()
		}
	}()
	watch := s.WatchPersisted(ctx, v)
	sale, err := s.RunSale(ctx, harness.SaleConfig{
		VoucherID: v, Users: 2000, Requests: 5000, Concurrency: 32, Seed: 1,
		OnProgress: func(done int64) {
			if done == 200 {
				once.Do(func() { close(killAt) })
			}
		},
	})
	require.NoError(t, err)
	require.NoError(t, <-restarted)

	persistedAt, err := watch.Wait(ctx, sale.Admitted, time.Minute)
	require.NoError(t, err)
	report, err := s.Check(ctx, v, sale)
	require.NoError(t, err)
	report.PersistedAt = persistedAt
	var out strings.Builder
	report.Print(&out)
	t.Log("\n" + out.String())

	require.Empty(t, report.Violations())
	require.EqualValues(t, stock, sale.Admitted, "demand exceeds supply: every unit is sold")
	require.EqualValues(t, stock, report.Live)
	require.Zero(t, report.RedisRemaining)
	require.Equal(t, sale.Requests-sale.Admitted, sale.Rejected["sold_out"]+sale.Rejected["user_limit"])

	// SIGTERM: every process exits cleanly.
	stopped = true
	require.NoError(t, s.Close())
}

func formatInt(v int64) string { return strconv.FormatInt(v, 10) }

// A red envelope sale end to end, a worker and the reaper killed mid-sale:
// every envelope grabbed once, by one user each, and the money conserved.
func TestEndToEndEnvelopeSaleSurvivesKills(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs the binaries")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := harness.StartStack(ctx, harness.Options{Dir: t.TempDir(), Workers: 2, Partitions: 4, Reaper: true,
		Env: []string{"FLASHSALE_TAKEOVER_MIN_IDLE=1500ms", "FLASHSALE_WORKER_BLOCK=300ms", "FLASHSALE_REAPER_INTERVAL=200ms"}})
	require.NoError(t, err)
	defer s.Close()

	const count, total = 400, 40_000
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "e2e envelopes", Kind: "envelope", TotalAmount: total, Count: count, MinAmount: 5, PerUserLimit: 1})
	require.NoError(t, err)
	kill := make(chan struct{})
	var once sync.Once
	killed := make(chan error, 1)
	go func() {
		select {
		case <-kill:
			if err := s.ReplaceWorker(0); err != nil {
				killed <- err
				return
			}
			killed <- s.RestartReaper()
		case <-ctx.Done():
			killed <- ctx.Err()
		}
	}()
	watch := s.WatchPersisted(ctx, v)
	sale, err := s.RunSale(ctx, harness.SaleConfig{VoucherID: v, Users: 1500, Requests: 3000, Concurrency: 32, Seed: 2,
		OnProgress: func(done int64) {
			if done == 150 {
				once.Do(func() { close(kill) })
			}
		}})
	require.NoError(t, err)
	require.NoError(t, <-killed)
	persistedAt, err := watch.Wait(ctx, sale.Admitted, time.Minute)
	require.NoError(t, err)
	report, err := s.Check(ctx, v, sale)
	require.NoError(t, err)
	report.PersistedAt = persistedAt
	var out strings.Builder
	report.Print(&out)
	t.Log("\n" + out.String())

	require.Empty(t, report.Violations())
	require.EqualValues(t, count, sale.Admitted, "demand exceeds supply: every envelope is grabbed")
	require.EqualValues(t, count, report.Live)
	require.Len(t, sale.Amounts, count, "every 202 says its amount")
	require.Equal(t, db.Amounts{Grabbed: total}, report.Amounts)
	requireIDsAsStrings(t, s)
}

// requireIDsAsStrings fails on a line of any role's log (the gateway's,
// the workers', the reaper's, audit lines too) with an id written as a
// number, or any number past 2^53: a log pipeline reads it as a double,
// and an order id a customer quotes would not be found.
func requireIDsAsStrings(t *testing.T, s *harness.Stack) {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(s.LogDir(), "*.log"))
	require.NoError(t, err)
	require.NotEmpty(t, logs)
	orders := 0
	for _, path := range logs {
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		for _, line := range strings.Split(string(raw), "\n") {
			if !strings.HasPrefix(line, "{") {
				continue // not a role's JSON (a Go runtime message)
			}
			d := json.NewDecoder(strings.NewReader(line))
			d.UseNumber()
			var fields map[string]any
			require.NoError(t, d.Decode(&fields), "%s: %s", path, line)
			for k, v := range fields {
				n, isNumber := v.(json.Number)
				if !isNumber {
					continue
				}
				require.False(t, k == "id" || strings.HasSuffix(k, "_id"), "%s: %s is a number: %s", filepath.Base(path), k, line)
				i, err := n.Int64()
				require.True(t, err != nil || (i <= 1<<53 && i >= -1<<53), "%s: %s is a number past 2^53: %s", filepath.Base(path), k, line)
			}
			if _, ok := fields["order_id"]; ok {
				orders++
			}
		}
	}
	require.Positive(t, orders, "no line named an order: the check has no power")
}

// The sale, a worker killed in it, with every role under its own Redis ACL
// user and MySQL user with only its DML grants, as docs/SECURITY.md says:
// nothing the pipeline does needs more, and the invariants hold.
func TestEndToEndSaleUnderLeastPrivilege(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs the binaries")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	hook := testsink.NewReceiver(t) // the relay, under the reaper's grants
	s, err := harness.StartStack(ctx, harness.Options{Dir: t.TempDir(), Workers: 2, Partitions: 4, Reaper: true, LeastPrivilege: true,
		Env:       []string{"FLASHSALE_TAKEOVER_MIN_IDLE=1500ms", "FLASHSALE_WORKER_BLOCK=300ms", "FLASHSALE_REAPER_INTERVAL=200ms"},
		ReaperEnv: []string{"FLASHSALE_EVENTS_WEBHOOK_URLS=" + hook.URL, "FLASHSALE_EVENTS_WEBHOOK_SECRET=" + testsink.Secret}})
	require.NoError(t, err)
	defer s.Close()

	// Unpaid orders expire after 15 s: long enough that none is cancelled
	// while the check reads them back (it compares MySQL with the API),
	// short enough to wait for the reaper's cancellations below.
	units, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "least privilege", Stock: 300, PerUserLimit: 2, PaymentTimeoutSeconds: 15})
	require.NoError(t, err)
	// The envelopes end 8 s after their creation, which comes when their
	// sale does (the unit sale before it took longer than 8 s on a loaded
	// machine, and every envelope claim was answered ended).
	var envelopes int64
	for _, v := range []*int64{&units, &envelopes} {
		if v == &envelopes {
			*v, err = s.CreateVoucher(ctx, harness.VoucherSpec{Name: "least privilege envelopes", Kind: "envelope", TotalAmount: 10_000, Count: 100,
				PerUserLimit: 1, EndsAt: time.Now().Add(8 * time.Second).UTC().Format(time.RFC3339)})
			require.NoError(t, err)
		}
		v := *v
		watch := s.WatchPersisted(ctx, v)
		var once sync.Once
		maxQty := 2
		if v == envelopes {
			maxQty = 1
		}
		sale, err := s.RunSale(ctx, harness.SaleConfig{VoucherID: v, Users: 500, Requests: 1000, Concurrency: 16, Seed: 3, MaxQuantity: maxQty,
			OnProgress: func(done int64) {
				if done == 100 && v == units {
					once.Do(func() { require.NoError(t, s.ReplaceWorker(0)) })
				}
			}})
		require.NoError(t, err)
		_, err = watch.Wait(ctx, sale.Admitted, time.Minute)
		require.NoError(t, err)
		report, err := s.Check(ctx, v, sale)
		require.NoError(t, err)
		var out strings.Builder
		report.Print(&out)
		t.Log("\n" + out.String())
		require.Empty(t, report.Violations())
		require.Positive(t, sale.Admitted)
	}
	// The operator's and the buyer's calls, under the gateway's grants.
	c := harness.NewClient(s.URL, 2)
	vid := strconv.FormatInt(units, 10)
	for _, path := range []string{"/pause", "/resume"} {
		status, err := c.Do(ctx, "POST", "/admin/v1/vouchers/"+vid+path, s.AdminToken, nil, nil)
		require.NoError(t, err)
		require.Equal(t, 200, status, path)
	}
	status, err := c.Do(ctx, "PATCH", "/admin/v1/vouchers/"+vid, s.AdminToken, map[string]int{"add_stock": 10}, nil)
	require.NoError(t, err)
	require.Equal(t, 200, status, "top-up")
	buyer := s.Token("least-privilege-buyer")
	var claimed struct {
		OrderID string `json:"order_id"`
	}
	status, err = c.Do(ctx, "POST", "/v1/vouchers/"+vid+"/orders", buyer, nil, &claimed)
	require.NoError(t, err)
	require.Equal(t, 202, status)
	testenv.Eventually(t, 30*time.Second, "the buyer cancels (once persisted)", func() bool {
		var o struct {
			Status string `json:"status"`
		}
		status, err := c.Do(ctx, "POST", "/v1/orders/"+claimed.OrderID+"/cancel", buyer, nil, &o)
		return err == nil && status == 200 && o.Status == "cancelled"
	})

	// The reaper (its own users) cancels the unpaid unit orders, gives
	// their units back to MySQL and Redis, and refunds the envelope sale
	// once it ends.
	require.NoError(t, wait.Until(ctx, time.Minute, "the unpaid cancelled, their units back, the envelopes refunded", func() (bool, string) {
		var created, owed, unrefunded int64
		s.DB.DB().Raw("SELECT COUNT(*) FROM orders WHERE status = 'created'").Scan(&created)
		s.DB.DB().Raw("SELECT COUNT(*) FROM releases WHERE redis_released_at IS NULL").Scan(&owed)
		s.DB.DB().Raw("SELECT COUNT(*) FROM vouchers WHERE kind = 'envelope' AND refunded_at IS NULL").Scan(&unrefunded)
		return created == 0 && owed == 0 && unrefunded == 0,
			fmt.Sprintf("%d orders still created, %d releases owed, %d not refunded", created, owed, unrefunded)
	}))
	n, _, err := s.RDB.RemainingStock(ctx, units)
	require.NoError(t, err)
	require.EqualValues(t, 310, n, "every unit back after the cancellations, and the top-up")
	// Every change is one event, written under the roles' own grants, and
	// the reaper sequenced them all: 1, 2, 3, ... with no gap.
	require.NoError(t, s.EventSequence(ctx, 30*time.Second))
	out, err := s.RunOutputEnv(ctx, s.RoleEnv("reaper"), "reaper", "events", "--json")
	require.NoError(t, err, out)
	var events struct {
		Published   int64 `json:"published_up_to"`
		First       int64 `json:"first_kept"`
		Kept        int64 `json:"kept"`
		Unpublished int64 `json:"unpublished"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &events), out)
	require.Positive(t, events.Published)
	require.Equal(t, [3]int64{1, events.Published, 0}, [3]int64{events.First, events.Kept, events.Unpublished}, out)
	// The webhook endpoint got them all; "events" says so per sink, and
	// "redeliver --after 0" sends them all again.
	all, err := s.DB.Events(ctx, 0, int(events.Published))
	require.NoError(t, err)
	testenv.Eventually(t, 30*time.Second, "the webhook endpoint has every event", func() bool {
		return len(testsink.Check(all, hook.Deliveries())) == 0
	})
	require.Empty(t, hook.Unverified())
	sink, err := event.WebhookName(hook.URL)
	require.NoError(t, err)
	testenv.Eventually(t, 10*time.Second, "reaper events: the sink delivered up to the last", func() bool {
		out, err := s.RunOutputEnv(ctx, s.RoleEnv("reaper"), "reaper", "events", "--json")
		require.NoError(t, err, out)
		var st struct {
			Sinks []struct {
				Name          string `json:"name"`
				DeliveredUpTo int64  `json:"delivered_up_to"`
				Undelivered   int64  `json:"undelivered"`
			} `json:"sinks"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &st), out)
		require.Len(t, st.Sinks, 1, out)
		require.Equal(t, sink, st.Sinks[0].Name)
		return st.Sinks[0].DeliveredUpTo == events.Published && st.Sinks[0].Undelivered == 0
	})
	before := len(hook.Deliveries())
	out, err = s.RunOutputEnv(ctx, s.RoleEnv("reaper"), "reaper", "events", "redeliver", "--sink", sink, "--after", "0")
	require.NoError(t, err, out)
	testenv.Eventually(t, 30*time.Second, "the events redelivered", func() bool {
		return len(hook.Deliveries()) >= before+int(events.Published)
	})
	_, err = s.RunOutputEnv(ctx, s.RoleEnv("reaper"), "reaper", "events", "redeliver", "--sink", "webhook:https://nobody.example/")
	require.Error(t, err, "redeliver needs --after or --failed")
	out, err = s.RunOutputEnv(ctx, s.RoleEnv("reaper"), "reaper", "events", "redeliver", "--sink", "webhook:https://nobody.example/", "--failed")
	require.Error(t, err, "no such sink: %s", out)

	// Each sale's report, from the gateway and from the reaper, each under
	// its own grants: they agree, and they account for every order, unit
	// and (envelopes) amount. The commands close their connections (each
	// had left one for mariadbd to log as aborted).
	aborted := abortedClients(t, s)
	for _, v := range []int64{units, envelopes} {
		vid := strconv.FormatInt(v, 10)
		var fromGateway map[string]any
		status, err := c.Do(ctx, "GET", "/admin/v1/vouchers/"+vid+"/report", s.AdminToken, nil, &fromGateway)
		require.NoError(t, err)
		require.Equal(t, 200, status, "%v", fromGateway)
		out, err := s.RunOutputEnv(ctx, s.RoleEnv("reaper"), "reaper", "report", vid, "--json")
		require.NoError(t, err, out)
		var fromReaper map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &fromReaper), out)
		require.NotContains(t, fromReaper, "refused_claims", "only a gateway replica knows its refusals")
		require.NotContains(t, fromReaper, "outcome_unknown_claims", "only a gateway replica knows its late answers")
		delete(fromGateway, "refused_claims")
		delete(fromGateway, "outcome_unknown_claims")
		require.Equal(t, fromGateway, fromReaper)
		text, err := s.RunOutputEnv(ctx, s.RoleEnv("reaper"), "reaper", "report", vid)
		require.NoError(t, err, text)
		require.Contains(t, text, "distinct buyers")
		t.Log("\n" + text)

		orders := fromReaper["orders"].(map[string]any)
		var sum float64
		for _, n := range orders {
			sum += n.(float64)
		}
		require.EqualValues(t, countOrders(t, s, "SELECT COUNT(*) FROM orders WHERE voucher_id = ?", v), fromReaper["admitted_orders"])
		require.Equal(t, fromReaper["admitted_orders"], sum, "every order has one status")
		require.Positive(t, fromReaper["distinct_buyers"])
		if v == envelopes {
			require.Nil(t, fromReaper["paid_share"], "envelopes are not paid for")
			require.Equal(t, orders["completed"], fromReaper["admitted_orders"])
			require.EqualValues(t, 10_000, fromReaper["grabbed_amount"].(float64)+fromReaper["refunded_amount"].(float64), "money is conserved")
		} else {
			require.Equal(t, 0.0, orders["created"], "the reaper cancelled the unpaid")
			require.EqualValues(t, 310, fromReaper["unsold_units"], "every unit unsold again")
			require.EqualValues(t, 10, fromReaper["topped_up_units"])
			require.Equal(t, fromReaper["released_units"], fromReaper["admitted_units"], "every unit taken came back")
		}
	}
	_, err = s.RunOutputEnv(ctx, s.RoleEnv("reaper"), "reaper", "draw", "verify", strconv.FormatInt(units, 10))
	require.Error(t, err, "not a draw")
	require.Equal(t, aborted, abortedClients(t, s), "the commands closed their MySQL connections")
	logs, err := filepath.Glob(filepath.Join(s.LogDir(), "*.log"))
	require.NoError(t, err)
	require.NotEmpty(t, logs)
	for _, l := range logs {
		b, err := os.ReadFile(l)
		require.NoError(t, err)
		require.NotContains(t, string(b), "NOPERM", l)
		require.NotContains(t, string(b), "command denied", l)
	}
}

// The sale on a Redis Cluster of three masters, unchanged: partitions
// spread over the masters, a worker killed mid-sale, the invariants, and
// reconcile (the binary, over the cluster) finding nothing to repair.
func TestEndToEndSaleOnARedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds and runs the binaries")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Claims get 2 s, not 300 ms: a hot voucher's claim that refills its
	// bucket makes round trips to several masters, and on a machine
	// busy with other tests that can outlast 300 ms; the check counts
	// any 503 as a violation.
	s, err := harness.StartStack(ctx, harness.Options{Dir: t.TempDir(), Workers: 2, Partitions: 8, Reaper: true, Cluster: true,
		Env: []string{"FLASHSALE_TAKEOVER_MIN_IDLE=1500ms", "FLASHSALE_WORKER_BLOCK=300ms", "FLASHSALE_REAPER_INTERVAL=200ms",
			"FLASHSALE_CLAIM_TIMEOUT=2s"}})
	require.NoError(t, err)
	defer s.Close()

	var mu sync.Mutex
	var vouchers []int64
	for i := range 3 { // three vouchers: three partitions, on different masters
		v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "cluster " + strconv.Itoa(i), Stock: 200, PerUserLimit: 1})
		require.NoError(t, err)
		vouchers = append(vouchers, v)
	}
	for i, v := range vouchers {
		watch := s.WatchPersisted(ctx, v)
		var once sync.Once
		sale, err := s.RunSale(ctx, harness.SaleConfig{VoucherID: v, Users: 500, Requests: 1000, Concurrency: 16, Seed: uint64(i + 1),
			OnProgress: func(done int64) {
				if done == 100 && i == 0 {
					once.Do(func() { require.NoError(t, s.ReplaceWorker(0)) })
				}
			}})
		require.NoError(t, err)
		_, err = watch.Wait(ctx, sale.Admitted, time.Minute)
		require.NoError(t, err)
		report, err := s.Check(ctx, v, sale)
		require.NoError(t, err)
		require.Empty(t, report.Violations())
		require.EqualValues(t, 200, sale.Admitted)
	}

	// A hot voucher over three buckets, a worker killed mid-sale: every
	// unit sold, none stranded in a bucket, both stores at zero, its keys
	// on more than one master.
	hot, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "hot", Stock: 600, PerUserLimit: 2, StockBuckets: 3})
	require.NoError(t, err)
	watch := s.WatchPersisted(ctx, hot)
	var once sync.Once
	sale, err := s.RunSale(ctx, harness.SaleConfig{VoucherID: hot, Users: 500, Requests: 2000, Concurrency: 32, Seed: 9,
		OnProgress: func(done int64) {
			if done == 300 {
				once.Do(func() { require.NoError(t, s.ReplaceWorker(1)) })
			}
		}})
	require.NoError(t, err)
	require.EqualValues(t, 600, sale.Admitted)
	require.Zero(t, sale.AdmittedAfterSoldOut, "no claim was told sold_out while units were left")
	_, err = watch.Wait(ctx, sale.Admitted, time.Minute)
	require.NoError(t, err)
	report, err := s.Check(ctx, hot, sale)
	require.NoError(t, err)
	require.Empty(t, report.Violations())
	require.Zero(t, report.RedisRemaining)
	require.Zero(t, report.MySQLRemaining)
	masters := map[string]bool{}
	require.NoError(t, s.Cluster.Client().ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		keys, err := m.Keys(ctx, "flashsale:*:v:"+strconv.FormatInt(hot, 10)+"*").Result()
		if len(keys) > 0 {
			mu.Lock()
			masters[m.Options().Addr] = true
			mu.Unlock()
		}
		return err
	}))
	require.GreaterOrEqual(t, len(masters), 2, "the hot voucher's keys are on several masters")

	rec := reconcile(t, ctx, s)
	require.Len(t, rec, 4)
	for _, v := range rec {
		require.Empty(t, v.Differences)
	}
}

// abortedClients is mariadbd's count of connections a client left without
// closing them.
func abortedClients(t *testing.T, s *harness.Stack) int64 {
	t.Helper()
	var row struct {
		Name  string `gorm:"column:Variable_name"`
		Value int64  `gorm:"column:Value"`
	}
	require.NoError(t, s.DB.DB().Raw("SHOW GLOBAL STATUS LIKE 'Aborted_clients'").Scan(&row).Error)
	return row.Value
}
