package harness_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/rdb"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

func startStack(t *testing.T, ctx context.Context, env ...string) *harness.Stack {
	t.Helper()
	return startStackWith(t, ctx, harness.Options{Env: env})
}

// startStackWith is startStack with more options (o's Dir, Workers,
// Partitions and Reaper are startStack's).
func startStackWith(t *testing.T, ctx context.Context, o harness.Options) *harness.Stack {
	t.Helper()
	o.Dir, o.Workers, o.Partitions, o.Reaper = t.TempDir(), 1, 2, true
	s, err := harness.StartStack(ctx, o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestOpsEndpointsOfEveryBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binaries")
	}
	ctx := context.Background()
	s := startStack(t, ctx)
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "ops", Stock: 10, PerUserLimit: 1})
	require.NoError(t, err)
	sale, err := s.RunSale(ctx, harness.SaleConfig{VoucherID: v, Users: 20, Requests: 25, Concurrency: 4})
	require.NoError(t, err)

	procs := map[string]*harness.Proc{"gateway": s.Gateway, "worker": s.Workers[0], "reaper": s.Reaper}
	want := map[string][]string{
		"gateway": {`flashsale_claims_total{reason="",result="admitted"} 10`, `flashsale_claims_total{reason="sold_out",result="rejected"}`,
			`flashsale_claim_duration_seconds_bucket`, `flashsale_redis_script_duration_seconds_count{script="admit"}`,
			// Sold-out claims after the first may be answered without Redis.
			`flashsale_claims_pruned_total`, "go_goroutines"},
		"worker": {`flashsale_worker_orders_total{outcome="created"} 10`, "flashsale_worker_commit_duration_seconds_bucket", "flashsale_worker_batch_size_bucket"},
		"reaper": {`flashsale_build_info{commit=`, `flashsale_stream_length{partition="0"}`, `flashsale_stream_lag{partition="1"}`, "flashsale_reaper_passes_total", "flashsale_stream_scrape_ok 1"},
	}
	require.EqualValues(t, 10, sale.Admitted)
	for name, p := range procs {
		code, _ := get(t, p.OpsURL+"/livez")
		require.Equal(t, 200, code, name)
		code, body := get(t, p.OpsURL+"/readyz")
		require.Equal(t, 200, code, "%s: %s", name, body)
		code, _ = get(t, p.OpsURL+"/debug/pprof/")
		require.Equal(t, 404, code, "pprof is off by default")
		testenv.Eventually(t, 20*time.Second, name+" metrics", func() bool {
			_, metrics := get(t, p.OpsURL+"/metrics")
			for _, w := range want[name] {
				if !strings.Contains(metrics, w) {
					return false
				}
			}
			return true
		})
	}

	// Redis down: not ready, still alive (a blip must not restart pods).
	require.NoError(t, s.Redis.Kill())
	for name, p := range procs {
		code, body := get(t, p.OpsURL+"/readyz")
		require.Equal(t, 503, code, name)
		require.Equal(t, "not ready: redis\n", body, "%s names the dependency, not its error", name)
		code, _ = get(t, p.OpsURL+"/livez")
		require.Equal(t, 200, code, name)
	}
	require.NoError(t, s.Redis.Start())
	for name, p := range procs {
		testenv.Eventually(t, 20*time.Second, name+" ready again", func() bool { code, _ := get(t, p.OpsURL+"/readyz"); return code == 200 })
	}
}

func TestGatewaySIGTERMDrainsInFlightClaims(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binaries")
	}
	ctx := context.Background()
	// One user is the load here: no per-user rate limit.
	s := startStack(t, ctx, "FLASHSALE_SHUTDOWN_DELAY=1s", "FLASHSALE_USER_RATE=0")
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "term", Stock: 100000, PerUserLimit: 1000})
	require.NoError(t, err)

	client := harness.NewClient(s.URL, 16)
	tok := s.Token("u1")
	var answered, refused, bad atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				status, err := client.Do(ctx, "POST", "/v1/vouchers/"+itoa(v)+"/orders", tok, nil, nil)
				switch {
				case err != nil:
					refused.Add(1) // after the listener closed
					time.Sleep(10 * time.Millisecond)
				case status == 202 || status == 409:
					answered.Add(1)
				default:
					bad.Add(1)
				}
			}
		}()
	}
	testenv.Eventually(t, 20*time.Second, "claims flowing", func() bool { return answered.Load() > 100 })
	sent := time.Now()
	require.NoError(t, s.Gateway.Signal(syscall.SIGTERM))
	// During the shutdown delay: out of load balancing, still serving.
	testenv.Eventually(t, 20*time.Second, "readyz failing", func() bool { code, _ := get(t, s.Gateway.OpsURL+"/readyz"); return code == 503 })
	before := answered.Load()
	testenv.Eventually(t, 20*time.Second, "claims still answered during the delay", func() bool { return answered.Load() > before+50 })
	require.NoError(t, s.Gateway.Wait(), "exit status 0")
	close(stop)
	wg.Wait()
	took := time.Since(sent)
	require.GreaterOrEqual(t, took, time.Second, "waited the shutdown delay")
	require.Less(t, took, 10*time.Second)
	require.Zero(t, bad.Load(), "no in-flight claim got a 5xx or was cut off")
}

func TestWorkerSIGTERMCommitsTheBatchInHand(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binaries")
	}
	ctx := context.Background()
	s := startStack(t, ctx)
	require.NoError(t, s.Reaper.Stop(10*time.Second)) // nothing but the worker may touch the batch
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "drain", Stock: 100, PerUserLimit: 1})
	require.NoError(t, err)

	// Hold the voucher's row lock so the worker's commit waits mid-batch.
	tx := s.DB.DB().Begin()
	require.NoError(t, tx.Exec("SELECT stock FROM vouchers WHERE id = ? FOR UPDATE", v).Error)
	sale, err := s.RunSale(ctx, harness.SaleConfig{VoucherID: v, Users: 20, Requests: 20, Concurrency: 4})
	require.NoError(t, err)
	require.True(t, s.WaitBusy(ctx, 0, 5*time.Second), "the worker holds the batch")
	p := s.RDB.PartitionOf(v)
	held, err := s.RDB.Client().XPendingExt(ctx, &redis.XPendingExtArgs{Stream: rdb.StreamKey(p), Group: s.RDB.Group(),
		Start: "-", End: "+", Count: 1000, Consumer: s.WorkerNames[0]}).Result()
	require.NoError(t, err)
	inHand := map[string]bool{}
	for _, h := range held {
		inHand[h.ID] = true
	}
	stream, err := s.RDB.StreamOrders(ctx, p)
	require.NoError(t, err)
	heldOrders := 0
	for _, e := range stream {
		if inHand[e.StreamID] {
			heldOrders++
		}
	}
	require.NoError(t, s.Workers[0].Signal(syscall.SIGTERM))
	testenv.Eventually(t, 20*time.Second, "the worker to take the signal (/readyz fails)", func() bool {
		code, _ := get(t, s.Workers[0].OpsURL+"/readyz")
		return code == http.StatusServiceUnavailable
	})
	require.False(t, s.Workers[0].Exited(), "it does not abandon the batch in hand")
	require.NoError(t, tx.Rollback().Error)
	require.NoError(t, s.Workers[0].Wait(), "exit status 0\n%s", s.Workers[0].Log())

	var n int64
	require.NoError(t, s.DB.DB().Raw("SELECT COUNT(*) FROM orders WHERE voucher_id = ?", v).Scan(&n).Error)
	require.EqualValues(t, heldOrders, n, "the batch in hand was committed")
	b, err := s.RDB.PartitionBacklog(ctx, p)
	require.NoError(t, err)
	// ... and acknowledged; what it had not read yet waits for another worker.
	require.Equal(t, sale.Admitted-int64(heldOrders), b.Orders)
	require.Zero(t, b.Pending)
}

func TestReaperSIGTERMExitsCleanly(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binaries")
	}
	s := startStack(t, context.Background())
	testenv.Eventually(t, 20*time.Second, "a reaper round", func() bool {
		_, m := get(t, s.Reaper.OpsURL+"/metrics")
		return strings.Contains(m, "flashsale_reaper_passes_total") && !strings.Contains(m, "flashsale_reaper_passes_total 0")
	})
	require.NoError(t, s.Reaper.Stop(10*time.Second))
	require.Contains(t, s.Reaper.Log(), `"msg":"reaper stopped"`)
}

func itoa(v int64) string { return formatInt(v) }

func TestGatewaySmokeCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binaries")
	}
	ctx := context.Background()
	// A release that requires the token's issuer and audience: the smoke
	// test's tokens carry them (it answered 401 before).
	s := startStack(t, ctx, "FLASHSALE_JWT_ISSUER=https://id.example", "FLASHSALE_JWT_AUDIENCE=flashsale")
	out, err := s.RunOutput(ctx, "gateway", "smoke")
	require.NoError(t, err, out)
	require.Contains(t, out, "second claim: sold_out")
	require.Contains(t, out, "order persisted by a worker: created")
	// It leaves nothing to sell: its order cancelled, its voucher paused.
	m := regexp.MustCompile(`cleaned up: order (\d+) cancelled, voucher (\d+) paused`).FindStringSubmatch(out)
	require.Len(t, m, 3, out)
	var v struct {
		Paused bool `json:"paused"`
	}
	status, err := harness.NewClient(s.URL, 1).Do(ctx, "GET", "/admin/v1/vouchers/"+m[2], s.AdminToken, nil, &v)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)
	require.True(t, v.Paused, "the test voucher is paused")
	require.EqualValues(t, 1, countOrders(t, s, "SELECT COUNT(*) FROM orders WHERE id = ? AND status = 'cancelled'", m[1]))

	// An install without a JWT secret (users' tokens from a key set): the
	// smoke test cannot sign a token, says so, and passes.
	out, err = s.RunOutputEnv(ctx, []string{"FLASHSALE_JWT_SECRET="}, "gateway", "smoke")
	require.NoError(t, err, out)
	require.Contains(t, out, "skipped: no FLASHSALE_JWT_SECRET")

	// Without a worker the order never persists: the smoke test says so.
	for _, w := range s.Workers {
		require.NoError(t, w.Stop(10*time.Second))
	}
	require.NoError(t, s.Reaper.Stop(10*time.Second))
	out, err = s.RunOutputEnv(ctx, []string{"FLASHSALE_SMOKE_TIMEOUT=2s"}, "gateway", "smoke")
	require.Error(t, err, out)
}

// A process started while MySQL is down waits for it, not ready, instead
// of exiting (on Kubernetes: no crash loop during a database outage).
func TestWorkerStartedWhileMariaDBIsDownWaitsForIt(t *testing.T) {
	t.Parallel() // it mostly waits (see TestMain)
	if testing.Short() {
		t.Skip("runs the binaries")
	}
	ctx := context.Background()
	s := startStackWith(t, ctx, harness.Options{OwnMariaDB: true})
	require.NoError(t, s.MariaDB.Kill())
	w, err := s.StartWorker(1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Stop(10 * time.Second) })
	code, body := get(t, w.OpsURL+"/readyz")
	require.Equal(t, 503, code)
	require.Contains(t, body, "starting")
	testenv.Eventually(t, 30*time.Second, "a second attempt to connect (it said it waits twice)", func() bool {
		return strings.Count(w.Log(), "waiting for redis and mysql") >= 2
	})
	require.False(t, w.Exited(), "it waits rather than exits:\n%s", w.Log())

	require.NoError(t, s.MariaDB.Start())
	testenv.Eventually(t, 20*time.Second, "ready once MariaDB is back", func() bool { code, _ := get(t, w.OpsURL+"/readyz"); return code == 200 })
	require.NoError(t, w.Stop(10*time.Second), "and still stops cleanly")
}

// A process told to stop while it still waits for its stores exits 0: a
// rollout that stops a pod before it connected is no failure.
func TestSIGTERMWhileWaitingForTheStoresExitsCleanly(t *testing.T) {
	t.Parallel() // it mostly waits (see TestMain)
	if testing.Short() {
		t.Skip("runs the binaries")
	}
	ctx := context.Background()
	s := startStackWith(t, ctx, harness.Options{OwnMariaDB: true})
	require.NoError(t, s.MariaDB.Kill())
	w, err := s.StartWorker(1)
	require.NoError(t, err)
	code, body := get(t, w.OpsURL+"/readyz")
	require.Equal(t, 503, code)
	require.Contains(t, body, "starting")
	require.NoError(t, w.Stop(10*time.Second), "stopped while connecting:\n%s", w.Log())
	require.NoError(t, s.MariaDB.Start())
}

// The reaper's operator commands write JSON that tools can read.
func TestReaperCommandsWriteJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binaries")
	}
	ctx := context.Background()
	s := startStack(t, ctx)
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "json", Stock: 5, PerUserLimit: 1})
	require.NoError(t, err)
	rec := reconcile(t, ctx, s)
	require.Len(t, rec, 1)
	require.Equal(t, strconv.FormatInt(v, 10), rec[0].VoucherID)
	require.Empty(t, rec[0].Differences)

	for _, args := range [][]string{{"deadletters", "--json"}, {"deadletters", "list", "--json"}, {"deadletters", "requeue", "--all", "--json"}} {
		out, err := s.RunOutput(ctx, "reaper", args...)
		require.NoError(t, err, "%v: %s", args, out)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &m), "%v: %s", args, out)
		require.Len(t, m, 1, "%v: %s", args, out)
	}
	combined := func(args ...string) (string, error) { // stdout and stderr: what a person sees
		out, err := s.Command(ctx, "reaper", args...).CombinedOutput()
		return string(out), err
	}
	out, err := s.RunOutput(ctx, "reaper", "deadletters", "list", "--json")
	require.NoError(t, err)
	require.Contains(t, out, `"dead_letters": []`, "an empty list is [], not null")
	out, err = s.RunOutput(ctx, "reaper", "events")
	require.NoError(t, err)
	require.Contains(t, out, "published up to")
	out, err = s.RunOutput(ctx, "reaper", "deadletters", "list")
	require.NoError(t, err)
	require.Equal(t, "no dead letters\n", out, "an empty list says so, not a header alone")
	out, err = s.RunOutput(ctx, "reaper", "deadletters", "--json")
	require.NoError(t, err)
	require.NotContains(t, out, "oldest", "no oldest when there is none: %s", out)
	out, err = s.RunOutput(ctx, "reaper", "deadletters", "requeue", "--all")
	require.NoError(t, err)
	require.Equal(t, "no dead letters to requeue\n", out, "nothing to do is said, not a header alone")
	_, err = s.RunOutput(ctx, "reaper", "deadletters", "purge")
	require.Error(t, err, "purge needs --older-than or --all")
	out, err = combined("deadletters", "purge", "--older-than", "30d")
	require.Error(t, err, "without a terminal, purge deletes only with --yes")
	require.Contains(t, out, "--yes")
	out, err = s.RunOutput(ctx, "reaper", "deadletters", "purge", "--older-than", "30d", "--yes")
	require.NoError(t, err, out)
	require.Contains(t, out, "purged 0 dead letters", "it says what it deleted")
	out, err = combined("deadletters", "requeue", "123-0")
	require.Error(t, err, "a dead letter that is not there is no success")
	require.Contains(t, out, "no dead letter 123-0")
	_, err = s.RunOutput(ctx, "reaper", "deadletters", "frobnicate")
	require.Error(t, err)
	for _, args := range [][]string{{"report", "99"}, {"draw", "verify", "99"}} {
		out, err = combined(args...)
		require.Error(t, err)
		require.Contains(t, out, "no voucher 99", "%v: one answer for a voucher that is not there", args)
	}

	// reconcile's exit status: 0 the stores agree (above), 1 they differ.
	require.NoError(t, s.RDB.Client().HSet(ctx, fmt.Sprintf("flashsale:{p%d}:v:%d", s.RDB.PartitionOf(v), v), "stock", 2).Err())
	_, err = s.RunOutput(ctx, "reaper", "reconcile")
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 1, ee.ExitCode(), "the stores differ")
}

// The operator runs a sale from the command line: pause, resume, top-up
// and extend do what the admin API does, say what they did, change
// nothing with --dry-run, and answer a voucher that is not there, or a
// change its rules refuse, with exit 2 and why.
func TestTheSaleCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binaries")
	}
	ctx := context.Background()
	s := startStack(t, ctx)
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "Lamp", Stock: 5, PerUserLimit: 1})
	require.NoError(t, err)
	id := strconv.FormatInt(v, 10)
	run := func(args ...string) (string, int) {
		t.Helper()
		out, err := s.Command(ctx, "reaper", args...).CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		}
		require.NoError(t, err, "%v: %s", args, out)
		return string(out), 0
	}
	paused := func() bool {
		t.Helper()
		row, err := s.DB.Voucher(ctx, v)
		require.NoError(t, err)
		return row.Paused
	}
	redisStock := func() int64 {
		t.Helper()
		n, err := s.RDB.Client().HGet(ctx, fmt.Sprintf("flashsale:{p%d}:v:%d", s.RDB.PartitionOf(v), v), "stock").Int64()
		require.NoError(t, err)
		return n
	}

	out, code := run("pause", id, "--dry-run")
	require.Zero(t, code, out)
	require.Equal(t, "voucher "+id+" (Lamp): would pause; nothing changed (--dry-run)\n", out)
	require.False(t, paused(), "a dry run changes nothing")
	out, code = run("pause", id)
	require.Zero(t, code, out)
	require.Contains(t, out, "done: pause")
	require.True(t, paused())
	paused4, err := s.RDB.Client().HGet(ctx, fmt.Sprintf("flashsale:{p%d}:v:%d", s.RDB.PartitionOf(v), v), "paused").Result()
	require.NoError(t, err)
	require.Equal(t, "1", paused4, "Redis took the pause")
	out, code = run("pause", id)
	require.Zero(t, code, out)
	require.Contains(t, out, "paused already; nothing changed")
	out, code = run("resume", id)
	require.Zero(t, code, out)
	require.False(t, paused())
	out, code = run("resume", id)
	require.Zero(t, code, out)
	require.Contains(t, out, "not paused, so there is nothing to resume; nothing changed")

	out, code = run("top-up", id, "10", "--dry-run")
	require.Zero(t, code, out)
	require.Contains(t, out, "would add 10 units")
	require.EqualValues(t, 5, redisStock())
	out, code = run("top-up", id, "10")
	require.Zero(t, code, out)
	require.EqualValues(t, 15, redisStock(), "the units sell at once")
	_, code = run("top-up", id, "0")
	require.Equal(t, 2, code, "UNITS of 1 or more")
	out, code = run("top-up", id)
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "top-up VOUCHER_ID UNITS: UNITS is missing")

	end := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second).Format(time.RFC3339)
	out, code = run("extend", id, "--to", end)
	require.Zero(t, code, out)
	row, err := s.DB.Voucher(ctx, v)
	require.NoError(t, err)
	require.NotNil(t, row.EndsAt)
	require.Equal(t, end, row.EndsAt.UTC().Format(time.RFC3339))
	out, code = run("extend", id, "--to", "tomorrow")
	require.Equal(t, 2, code, out)
	require.Contains(t, out, `--to must be a time as 2026-12-24T22:00:00Z (RFC 3339, with its zone: Z or +08:00): "tomorrow" is not`) // fixed date: the example the message gives, nothing stored
	_, code = run("extend", id)
	require.Equal(t, 2, code, "--to is needed")

	for _, args := range [][]string{{"pause", "99"}, {"resume", "99"}, {"top-up", "99", "1"}, {"extend", "99", "--to", end}} {
		out, code = run(args...)
		require.Equal(t, 2, code, "%v", args)
		require.Contains(t, out, "no voucher 99", "%v", args)
	}

	// Each command that changed the sale is on the record, by the CLI's
	// user, as the admin API's actions are: a row of the voucher's
	// history and one JSON line on stderr; a dry run and a refusal, none.
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	who := "cli:" + cmp.Or(name, "uid-"+strconv.Itoa(os.Getuid()))
	acts, err := s.DB.VoucherActions(ctx, v, 50)
	require.NoError(t, err)
	var got []string
	for _, a := range slices.Backward(acts) {
		if a.Action != db.ActionCreated {
			require.Equal(t, who, string(a.Actor), a.Action)
		}
		got = append(got, a.Action+": "+a.Before+" → "+a.After)
	}
	require.Equal(t, []string{"voucher created:  → kind=units stock_total=5 per_user_limit=1",
		"voucher paused: paused=false → paused=true", "voucher resumed: paused=true → paused=false",
		"stock added: stock_total=5 → stock_total=15", "end moved: ends_at=none → ends_at=" + end}, got)
	_, code = run("top-up", id, "1")
	require.Zero(t, code)
	cmd := s.Command(ctx, "reaper", "pause", id)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Run())
	var line map[string]any
	require.NoError(t, json.Unmarshal([]byte(stderr.String()), &line), "one JSON line: %s", stderr.String())
	require.Equal(t, "voucher paused", line["msg"])
	require.Equal(t, "info", line["level"])
	require.Equal(t, id, line["voucher_id"])
	require.Equal(t, who, line["by"])
	require.Equal(t, "paused=false", line["before"])
	require.Equal(t, "paused=true", line["after"])
	rec := reconcile(t, ctx, s)
	require.Len(t, rec, 1)
	require.Empty(t, rec[0].Differences, "the stores agree after the commands")

	// create: a sale of units from flags, any sale from the API's JSON,
	// the API's rules, a dry run that creates nothing.
	out, code = run("create", "Winter lamp", "--stock", "20", "--limit", "2", "--pay-within", "10m", "--dry-run")
	require.Zero(t, code, out)
	require.Contains(t, out, `would create "Winter lamp", units, 20 on sale, 2 a buyer, pay within 10m0s; nothing created (--dry-run)`)
	out, code = run("create", "Winter lamp", "--stock", "20", "--limit", "2", "--pay-within", "10m")
	require.Zero(t, code, out)
	created := regexp.MustCompile(`voucher (\d+) created: "Winter lamp", units, 20 on sale, 2 a buyer, pay within 10m0s`).FindStringSubmatch(out)
	require.NotNil(t, created, out)
	lamp, err := strconv.ParseInt(created[1], 10, 64)
	require.NoError(t, err)
	row, err = s.DB.Voucher(ctx, lamp)
	require.NoError(t, err)
	require.Equal(t, [3]int64{20, 2, 600}, [3]int64{row.StockTotal, row.PerUserLimit, row.PaymentTimeoutSeconds})
	c := harness.NewClient(s.URL, 1)
	for _, want := range []int{202, 202, 409} { // on sale in Redis at once, 2 a buyer
		status, err := c.Do(ctx, "POST", "/v1/vouchers/"+created[1]+"/orders", s.Token("lamp-buyer"), nil, nil)
		require.NoError(t, err)
		require.Equal(t, want, status)
	}
	acts, err = s.DB.VoucherActions(ctx, lamp, 5)
	require.NoError(t, err)
	require.Len(t, acts, 1)
	require.Equal(t, who, string(acts[0].Actor))
	body := filepath.Join(t.TempDir(), "sale.json")
	require.NoError(t, os.WriteFile(body, []byte(`{"name":"from json","stock":3,"per_user_limit":1}`), 0o600))
	out, code = run("create", "--json", body)
	require.Zero(t, code, out)
	require.Contains(t, out, `created: "from json", units, 3 on sale`)
	for args, want := range map[string]string{
		"create":                              "create needs the sale's NAME",
		"create x --stock 0":                  "stock",
		"create x --stock 5 --ends yesterday": `--ends must be a time as 2026-12-24T22:00:00Z`, // fixed date: the message's example, nothing stored
		"create x --stock 5 --ends " + time.Now().Add(-time.Hour).UTC().Format(time.RFC3339): "ends_at must be in the future",
		"create x --stock 5 --json " + body:                                                  "create takes --json FILE or NAME and flags, not both",
	} {
		out, code = run(strings.Fields(args)...)
		require.Equal(t, 2, code, "%s: %s", args, out)
		require.Contains(t, out, want, args)
	}
	// A command that fails still exports its spans: they are flushed
	// before it exits (os.Exit runs no deferred call, and they were lost).
	var exported atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b, _ := io.ReadAll(r.Body); len(b) > 0 {
			exported.Add(1)
		}
	}))
	defer collector.Close()
	cmd = s.Command(ctx, "reaper", "pause", "99")
	cmd.Env = append(cmd.Env, "FLASHSALE_TRACING_ENDPOINT="+collector.URL+"/v1/traces", "FLASHSALE_TRACING_SAMPLE_RATIO=1")
	traced, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", traced)
	require.Equal(t, 2, ee.ExitCode())
	require.Positive(t, exported.Load(), "the failing command's spans (its MySQL read) were exported")
	require.NoError(t, os.WriteFile(body, []byte(`{"name":"x","stok":3}`), 0o600))
	out, code = run("create", "--json", body)
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "is not a sale's JSON")
	vs, err := s.DB.Vouchers(ctx, 0, 100)
	require.NoError(t, err)
	require.Len(t, vs, 3, "the lamp, Winter lamp and from json: nothing else created")
}

// reaper events tail prints each event as it is published: every kept one
// with --after 0, those of one voucher with --voucher, JSON with --json,
// and stops on Ctrl-C with exit 0.
func TestEventsTailFollowsTheEvents(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binaries")
	}
	ctx := context.Background()
	s := startStack(t, ctx)
	a, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "a", Stock: 5, PerUserLimit: 1})
	require.NoError(t, err)
	b, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "b", Stock: 5, PerUserLimit: 1})
	require.NoError(t, err)
	c := harness.NewClient(s.URL, 2)
	claim := func(v int64, user string) {
		t.Helper()
		status, err := c.Do(ctx, "POST", "/v1/vouchers/"+strconv.FormatInt(v, 10)+"/orders", s.Token(user), nil, nil)
		require.NoError(t, err)
		require.Equal(t, 202, status)
	}
	claim(a, "ann")
	claim(b, "ben")

	follow := func(args ...string) (lines chan string, stop func() int) {
		cmd := s.Command(ctx, "reaper", append([]string{"events", "tail"}, args...)...)
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		lines = make(chan string, 100)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		return lines, func() int {
			require.NoError(t, cmd.Process.Signal(os.Interrupt))
			err := cmd.Wait()
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return ee.ExitCode()
			}
			require.NoError(t, err)
			return 0
		}
	}
	next := func(lines chan string) string {
		t.Helper()
		select {
		case l := <-lines:
			return l
		case <-time.After(60 * time.Second):
			t.Fatal("no event printed")
			return ""
		}
	}
	all, stopAll := follow("--after", "0", "--json")
	seen := map[string]bool{}
	for len(seen) < 2 {
		var ev struct {
			Type string `json:"type"`
			Data struct {
				VoucherID string `json:"voucher_id"`
			} `json:"data"`
		}
		l := next(all)
		require.NoError(t, json.Unmarshal([]byte(l), &ev), l)
		require.Equal(t, "order.created", ev.Type)
		seen[ev.Data.VoucherID] = true
	}
	require.Zero(t, stopAll(), "Ctrl-C: exit 0")

	// From the last event published now: a tail started from "the last
	// published" when its process gets to it may start past the claims
	// below, on a loaded machine (it printed nothing in a minute).
	last, err := s.DB.LastSequence(ctx)
	require.NoError(t, err)
	one, stopOne := follow("--voucher", strconv.FormatInt(a, 10), "--after", strconv.FormatInt(last, 10))
	claim(b, "bob")
	claim(a, "amy")
	l := next(one)
	require.Regexp(t, `^[0-9]+  [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:.]+  order\.created +order [0-9]+  voucher `+strconv.FormatInt(a, 10)+`  user amy$`, l, "a line a person reads, with its date, of voucher a only")
	require.Zero(t, stopOne())
}

// countOrders runs a COUNT(*) query on the stack's database.
func countOrders(t *testing.T, s *harness.Stack, query string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, s.DB.DB().Raw(query, args...).Scan(&n).Error)
	return n
}
