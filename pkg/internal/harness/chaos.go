package harness

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/flashsale/flashsale/pkg/backoff"
	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/draw"
	"github.com/flashsale/flashsale/pkg/internal/testsink"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/reaper"
)

// ChaosConfig shapes a sale run under injected faults.
type ChaosConfig struct {
	Dir         string
	Duration    time.Duration // how long claims are fired; faults are spread over it
	Users       int
	Stock       int64
	PerUser     int64
	Concurrency int
	// Rate caps claims per second, so orders keep flowing all sale long.
	Rate int
	// PaymentTimeout of the voucher; orders not paid by then are cancelled.
	PaymentTimeout time.Duration
	// PayShare of admitted orders is paid; CancelShare more are cancelled
	// by their buyers; the rest expire.
	PayShare, CancelShare float64
	// MaxQuantity, above 1, makes claims ask for 1 to MaxQuantity units.
	MaxQuantity int
	// SideRate, when set, runs three more sales beside the main one, at
	// this many claims per second each: red envelopes (Envelopes of them,
	// ending just after the sale, so the reaper refunds what is left), a
	// pool of Codes codes (paid like units, a cancelled one sold again)
	// and a draw of Codes/4 units whose entries close once the faults are
	// over (the reaper is then killed and restarted while the draw is due).
	SideRate  int
	Envelopes int64
	Codes     int
	// TakeoverMinIdle is FLASHSALE_TAKEOVER_MIN_IDLE; a stopped worker stays
	// stopped 2.5 times as long.
	TakeoverMinIdle time.Duration
	// Log receives a line per fault as it happens (may be nil).
	Log io.Writer
	// Cluster runs the sale on a Redis Cluster of three masters with a
	// replica each: the Redis fault kills the master of the main voucher's
	// first bucket (its replica is promoted) and restarts it, a replica
	// now. Replication is asynchronous: what the master had not sent is
	// lost, reported (ReplicationLost), and repaired with reconcile
	// --repair before the stores are compared.
	Cluster bool
	// StockBuckets spreads the main voucher over buckets (a hot voucher).
	StockBuckets int
	// Durability is FLASHSALE_REDIS_DURABILITY ("" = none). With replica
	// on a cluster, the Redis fault lets the master's replica lag for a
	// second of the sale before the master is killed and that replica
	// promoted, and no 202 may be lost: ReplicationLost must stay 0.
	Durability string
	// Sinks, when set, are the events' sinks the reapers relay to: every
	// event must reach each at least once, the sequence whole, duplicates
	// the same bytes, one order's events in order.
	Sinks *Sinks
}

// Sinks are the events' receivers of a run: a webhook endpoint and a
// Kafka broker, in the test's process.
type Sinks struct {
	Webhook *testsink.Receiver
	Kafka   *testsink.Kafka
}

// env is the reapers' environment for the sinks.
func (k *Sinks) env() []string {
	return []string{"FLASHSALE_EVENTS_WEBHOOK_URLS=" + k.Webhook.URL, "FLASHSALE_EVENTS_WEBHOOK_SECRET=" + testsink.Secret,
		"FLASHSALE_EVENTS_KAFKA_BROKERS=" + k.Kafka.Addr(), "FLASHSALE_EVENTS_KAFKA_TOPIC=" + k.Kafka.Topic}
}

// check waits, up to timeout, until each sink has every event of the
// outbox, and returns what is wrong and how many duplicates each got.
func (k *Sinks) check(ctx context.Context, s *Stack, timeout time.Duration) (problems []string, dupWebhook, dupKafka int, err error) {
	last, err := s.DB.LastSequence(ctx)
	if err != nil {
		return nil, 0, 0, err
	}
	want, err := s.DB.Events(ctx, 0, int(last)+1)
	if err != nil {
		return nil, 0, 0, err
	}
	deadline := time.Now().Add(timeout)
	for {
		hooks := k.Webhook.Deliveries()
		kafka, bad, kerr := k.Kafka.Deliveries(ctx)
		problems = append(testsink.Check(want, hooks), bad...)
		for _, p := range testsink.Check(want, kafka) {
			problems = append(problems, "kafka: "+p)
		}
		if kerr != nil {
			problems = append(problems, "kafka: "+kerr.Error())
		}
		for _, u := range k.Webhook.Unverified() {
			problems = append(problems, "webhook: a delivery failed verification: "+u)
		}
		if len(problems) == 0 || time.Now().After(deadline) {
			return problems, testsink.Duplicates(hooks), testsink.Duplicates(kafka), nil
		}
		if err := backoff.Sleep(ctx, 200*time.Millisecond); err != nil {
			return nil, 0, 0, err
		}
	}
}

// Faults counts the faults injected.
type Faults struct {
	WorkerKills, WorkerStops, ReaperKills, MariaDBKills, RedisKills int
	// MySQLReadOnly counts spells of read_only=ON (a failover) and
	// MariaDBPauses spells of a frozen mariadbd (SIGSTOP, a hung host).
	MySQLReadOnly, MariaDBPauses int
	// MidBatch counts worker kills and stops that hit a worker holding
	// unacknowledged entries.
	MidBatch int
}

// ChaosReport is what a chaos run came to.
type ChaosReport struct {
	Faults     Faults
	Sale       *SaleResult
	StockTotal int64
	PerUser    int64
	// Outcomes of the 202 orders, by final status; Lost are not in MySQL.
	Final map[order.Status]int64
	Lost  int64
	// Unannounced orders are in MySQL without a 202: the script ran but the
	// answer was lost (Redis killed before replying). At most as many as
	// the claims answered 503 or failed.
	Unannounced int64
	// On a cluster: 202 orders lost with a killed master's unreplicated
	// writes (counted in Lost too, and not a violation there), and
	// whether reconcile --repair had to rewrite Redis afterwards.
	ReplicationLost int64
	Repaired        bool
	durability      string
	PaidAcked       int64 // payments answered 200
	PaidAckedLost   int64 // of those, not paid in MySQL
	PayTooLate      int64 // payments answered payment_expired
	// Buyers' cancels answered 200; of those, orders not cancelled in
	// MySQL, and those cancelled by their buyer (not expired first).
	CancelAcked, CancelAckedLost, CancelledByBuyer int64
	Live                                           int64 // units of the paid and created orders in MySQL
	UsersOverLimit                                 int64
	MySQLRemaining                                 int64
	RedisRemaining                                 int64
	PendingEntries                                 int64
	DeadLetters                                    int64
	DeadUnexplained                                int64 // dead letters without a failed order and a done release
	FailedByFault                                  int64 // failed orders whose reason is no verdict on the order (dead-lettered)
	// ReadOnlyRefusals counts log lines of the binaries reporting a write
	// refused by read_only: evidence the read-only spell hit the pipeline.
	ReadOnlyRefusals int64
	ReconcileDiffs   int
	// The outbox: as Report's, over every voucher, and what is wrong
	// with the sequence the reapers gave ("": nothing).
	EventsMissing, EventsDuplicated, EventsNotLast int64
	EventSequence                                  string
	// The sinks (ChaosConfig.Sinks): what is wrong, and the duplicates
	// each received (after the reaper's kills).
	SinkProblems                       []string
	WebhookDuplicates, KafkaDuplicates int
	sinks                              bool
	Quiescence                         time.Duration
	// Side are the side sales' reports (envelopes, codes), Draw the draw's.
	Side []*Report
	Draw *DrawReport
	// What the reaper processes logged doing, summed over their restarts.
	ReaperTookOver, ReaperCancelled, ReaperDeadLettered, ReaperConsumersRemoved int64
}

// RunChaos starts a stack with a reaper, sells under faults, waits for
// quiescence and checks the invariants.
func RunChaos(ctx context.Context, cfg ChaosConfig) (*ChaosReport, error) {
	logf := func(format string, args ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, "%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
		}
	}
	replicas := 0 // on a cluster, a replica for each master
	if cfg.Cluster {
		replicas = 1
	}
	var sinkEnv []string
	if cfg.Sinks != nil {
		sinkEnv = cfg.Sinks.env()
	}
	s, err := StartStack(ctx, Options{
		Dir: cfg.Dir, Workers: 2, Partitions: 4, Reaper: true, RestrictedUser: true, Cluster: cfg.Cluster, ClusterReplicas: replicas,
		ReaperEnv: sinkEnv,
		RedisArgs: []string{"--appendonly", "yes", "--appendfsync", "always"},
		Env: []string{
			"FLASHSALE_TAKEOVER_MIN_IDLE=" + cfg.TakeoverMinIdle.String(),
			"FLASHSALE_REAPER_INTERVAL=300ms",
			"FLASHSALE_CONSUMER_GONE_AFTER=10s",
			"FLASHSALE_WORKER_BLOCK=300ms",
			"FLASHSALE_LOG_LEVEL=info",
			"FLASHSALE_REDIS_DURABILITY=" + cmp.Or(cfg.Durability, "none"),
		},
	})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	v, err := s.CreateVoucher(ctx, VoucherSpec{Name: "chaos", Stock: cfg.Stock, PerUserLimit: cfg.PerUser,
		PaymentTimeoutSeconds: int64(cfg.PaymentTimeout / time.Second), StockBuckets: cfg.StockBuckets})
	if err != nil {
		return nil, err
	}
	rep := &ChaosReport{StockTotal: cfg.Stock, PerUser: cfg.PerUser, Final: map[order.Status]int64{}, durability: cfg.Durability}
	type side struct {
		sale SaleConfig
		paid bool // its orders await payment (codes; envelopes need none)
	}
	var sides []side
	var drawn *DrawReport
	if cfg.SideRate > 0 {
		codes, err := s.CreateVoucher(ctx, VoucherSpec{Name: "chaos codes", Kind: "codes", Codes: Codes(cfg.Codes), PerUserLimit: 1,
			PaymentTimeoutSeconds: int64(cfg.PaymentTimeout / time.Second)})
		if err != nil {
			return nil, err
		}
		// The draw's entries close when the faults are over (EndDrawNow),
		// so the reaper can be killed while it is due. Its winners have
		// ten minutes to pay: quiescence does not wait for them (its
		// waitlist is tested in pkg/reaper).
		drawEnds := time.Now().Add(cfg.Duration + 10*time.Minute).UTC().Truncate(time.Second)
		dv, err := s.CreateVoucher(ctx, VoucherSpec{Name: "chaos draw", Stock: int64(cfg.Codes / 4), PerUserLimit: 1,
			EndsAt: drawEnds.Format(time.RFC3339), Allocation: draw.Draw, PaymentTimeoutSeconds: 600})
		if err != nil {
			return nil, err
		}
		drawn = &DrawReport{VoucherID: dv, Stock: int64(cfg.Codes / 4), EndsAt: drawEnds}
		// The envelopes' sale ends (its leftover money refunded) 2 s after
		// the side sales' claims stop: its end is taken last, just before
		// they start, so that a busy machine's slow setup (the codes, the
		// draw, 20,000 buyers' tokens) does not spend the window before
		// the first claim (a run beside a second copy of the suite and its
		// builds: 553 claims, 494 refused ended, 0 admitted). Whole
		// seconds: one more, so that rounding never shortens it.
		s.Tokens(cfg.Users)
		ends := time.Now().Add(cfg.Duration + 3*time.Second).UTC().Truncate(time.Second).Format(time.RFC3339)
		env, err := s.CreateVoucher(ctx, VoucherSpec{Name: "chaos envelopes", Kind: "envelope", TotalAmount: 100 * cfg.Envelopes,
			Count: cfg.Envelopes, PerUserLimit: 1, EndsAt: ends})
		if err != nil {
			return nil, err
		}
		for _, sd := range []side{{SaleConfig{VoucherID: env}, false}, {SaleConfig{VoucherID: codes}, true}, {SaleConfig{VoucherID: dv}, false}} {
			sd.sale = SaleConfig{VoucherID: sd.sale.VoucherID, Users: cfg.Users, Duration: cfg.Duration, Rate: cfg.SideRate, Concurrency: 4,
				Seed: uint64(time.Now().UnixNano()) + uint64(sd.sale.VoucherID)}
			sides = append(sides, sd)
		}
	}

	// Payers pay a share of the admitted orders, retrying through faults.
	type admitted struct {
		id     int64
		user   string
		at     time.Time
		cancel bool // the buyer cancels it instead
	}
	var cancelled []int64
	toPay := make(chan admitted, 1<<20)
	var payMu sync.Mutex
	paid := map[int64]bool{}
	var payers sync.WaitGroup
	client := NewClient(s.URL, 16)
	for range 8 {
		payers.Add(1)
		go func() {
			defer payers.Done()
			for a := range toPay {
				deadline := a.at.Add(cfg.PaymentTimeout + 2*time.Second)
				tok := s.Token(a.user)
				for time.Now().Before(deadline) && ctx.Err() == nil && a.cancel {
					var body struct{ Error string }
					status, err := client.Do(ctx, "POST", "/v1/orders/"+strconv.FormatInt(a.id, 10)+"/cancel", tok, nil, &body)
					if err == nil && status == 200 {
						payMu.Lock()
						cancelled = append(cancelled, a.id)
						payMu.Unlock()
						break
					}
					if body.Error == "order_not_cancellable" || body.Error == "payment_expired" { // the reaper was first
						break
					}
					time.Sleep(50 * time.Millisecond) // order_pending, 503, a lost connection: retry
				}
				for time.Now().Before(deadline) && ctx.Err() == nil && !a.cancel {
					status, code, err := client.Pay(ctx, a.id, tok)
					if err == nil && status == 200 {
						payMu.Lock()
						paid[a.id] = true
						payMu.Unlock()
						break
					}
					if code == "payment_expired" {
						payMu.Lock()
						rep.PayTooLate++
						payMu.Unlock()
						break
					}
					time.Sleep(50 * time.Millisecond) // order_pending, 503, a lost connection: retry
				}
			}
		}()
	}

	// Faults, spread over the sale.
	faultsDone := make(chan error, 1)
	go func() { faultsDone <- injectFaults(ctx, s, cfg, v, &rep.Faults, logf) }()

	// The side sales; codes are paid like units.
	sideSales := make([]*SaleResult, len(sides))
	sideErrs := make([]error, len(sides))
	var sideWG sync.WaitGroup
	for i, sd := range sides {
		sc := sd.sale
		if sd.paid {
			sc.OnAdmit = func(id int64, user string) {
				if x := share(id); x < cfg.PayShare+cfg.CancelShare {
					toPay <- admitted{id, user, time.Now(), x >= cfg.PayShare}
				}
			}
		}
		sideWG.Add(1)
		go func() {
			defer sideWG.Done()
			sideSales[i], sideErrs[i] = s.RunSale(ctx, sc)
		}()
	}

	sale, err := s.RunSale(ctx, SaleConfig{
		VoucherID: v, Users: cfg.Users, Duration: cfg.Duration, Rate: cfg.Rate, Concurrency: cfg.Concurrency, Seed: uint64(time.Now().UnixNano()),
		MaxQuantity: cfg.MaxQuantity,
		OnAdmit: func(id int64, user string) {
			if x := share(id); x < cfg.PayShare+cfg.CancelShare {
				toPay <- admitted{id, user, time.Now(), x >= cfg.PayShare}
			}
		},
	})
	if err != nil {
		return nil, err
	}
	rep.Sale = sale
	sideWG.Wait()
	if err := errors.Join(sideErrs...); err != nil {
		return nil, err
	}
	if err := <-faultsDone; err != nil {
		return nil, fmt.Errorf("injecting faults: %w", err)
	}
	// The faults over, the draw's entries close, and the reaper dies
	// again and again while the draw is due.
	drawKills := make(chan error, 1)
	if drawn != nil {
		if drawn.EndsAt, err = s.EndDrawNow(ctx, drawn.VoucherID); err != nil {
			return nil, err
		}
		go func() {
			n, err := s.KillReaperWhileDrawDue(ctx, drawn.VoucherID, drawn.EndsAt, 150*time.Millisecond)
			drawn.ReaperKills = n
			drawKills <- err
		}()
	} else {
		drawKills <- nil
	}
	close(toPay)
	payers.Wait()
	rep.PaidAcked = int64(len(paid))
	logf("sale over: %d claims, %d admitted, %d paid; waiting for quiescence", sale.Requests, sale.Admitted, rep.PaidAcked)

	start := time.Now()
	if err := waitQuiescent(ctx, s, 3*time.Minute); err != nil {
		return rep, err
	}
	if err := <-drawKills; err != nil {
		return rep, fmt.Errorf("killing the reaper while the draw is due: %w", err)
	}
	rep.Quiescence = time.Since(start)
	for i, sd := range sides {
		if drawn != nil && sd.sale.VoucherID == drawn.VoucherID {
			drawn.Sale = sideSales[i]
			if err := s.finishDraw(ctx, drawn); err != nil {
				return rep, fmt.Errorf("draw: %w", err)
			}
			rep.Draw = drawn
			logf("draw: %d entries, %d winners, %d reaper kills while due; verify exit %d", drawn.Entries, drawn.Winners, drawn.ReaperKills, drawn.VerifyExit)
			continue
		}
		side, err := s.Check(ctx, sd.sale.VoucherID, sideSales[i])
		if err != nil {
			return rep, err
		}
		rep.Side = append(rep.Side, side)
	}
	// The buyers' acknowledged cancels are cancelled in MySQL: by their
	// buyer, or by the reaper first when the order reached MySQL after its
	// payment window (a cancel of a cancelled order answers 200).
	rep.CancelAcked = int64(len(cancelled))
	for i := 0; i < len(cancelled); i += 1000 {
		part := cancelled[i:min(i+1000, len(cancelled))]
		var n, byBuyer int64
		if err := s.DB.DB().WithContext(ctx).Raw("SELECT COUNT(*), COALESCE(SUM(reason = ?), 0) FROM orders WHERE id IN ? AND status = 'cancelled'",
			db.ReasonCancelled, part).Row().Scan(&n, &byBuyer); err != nil {
			return rep, err
		}
		rep.CancelAckedLost += int64(len(part)) - n
		rep.CancelledByBuyer += byBuyer
	}
	if err := rep.check(ctx, s, v, paid, cfg.Sinks); err != nil || !cfg.Cluster {
		return rep, err
	}
	// On a cluster the stores may disagree by what replication lost:
	// repair, as the runbook says, and compare again.
	rep.ReplicationLost = rep.Lost
	if rep.ReconcileDiffs == 0 && rep.RedisRemaining == rep.MySQLRemaining {
		return rep, nil
	}
	logf("reconcile finds %d differences after the failover; reconcile --repair", rep.ReconcileDiffs)
	if _, err := reaper.Reconcile(ctx, s.RDB, s.DB, time.Now(), true); err != nil {
		return rep, err
	}
	rep.Repaired = true
	fresh := &ChaosReport{StockTotal: rep.StockTotal, PerUser: rep.PerUser, Final: map[order.Status]int64{}, Sale: rep.Sale}
	if err := fresh.check(ctx, s, v, paid, cfg.Sinks); err != nil {
		return rep, err
	}
	rep.RedisRemaining, rep.ReconcileDiffs = fresh.RedisRemaining, fresh.ReconcileDiffs
	return rep, nil
}

// share maps an order id to [0, 1), the same way every run.
func share(id int64) float64 {
	h := fnv.New32a()
	h.Write([]byte(strconv.FormatInt(id, 10)))
	return float64(h.Sum32()%1000) / 1000
}

func injectFaults(ctx context.Context, s *Stack, cfg ChaosConfig, voucher int64, f *Faults, logf func(string, ...any)) error {
	redisFault := "kill -9 redis-server (AOF, appendfsync always), restart after 0.5s"
	if s.Cluster != nil {
		redisFault = "kill -9 the master of the hot voucher's first bucket (its replica, asynchronous, is promoted); restart it, a replica now"
	}
	var lag time.Duration
	if s.Cluster != nil && cfg.Durability == "replica" {
		lag = time.Second
		redisFault = "the replica of the hot voucher's first bucket's master lags for 1s (stopped, its master's output buffer full), then kill -9 the master (the lagging replica is promoted); restart it, a replica now"
	}
	at := func(frac float64) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(frac * float64(cfg.Duration))):
			return nil
		}
	}
	// busy waits (briefly) until worker i holds a batch, so a kill or stop
	// lands mid-batch; it counts the ones that did.
	busy := func(i int, within time.Duration) {
		if s.WaitBusy(ctx, i, within) {
			f.MidBatch++
		}
	}
	killWorker := func(i int) func() error {
		return func() error {
			busy(i, 2*time.Second)
			f.WorkerKills++
			return s.ReplaceWorker(i)
		}
	}
	steps := []struct {
		wait float64
		name string
		do   func() error
	}{
		{0.08, "kill -9 worker 0 mid-batch (a new pod takes its place)", killWorker(0)},
		{0.07, "kill -9 mariadbd; while it is down, SIGSTOP worker 1 and kill -9 worker 0, both holding batches; restart mariadbd after 2s", func() error {
			f.MariaDBKills++
			if err := s.MariaDB.Kill(); err != nil {
				return err
			}
			time.Sleep(300 * time.Millisecond)
			busy(1, time.Second)
			f.WorkerStops++
			w := s.Workers[1]
			if err := w.Signal(syscall.SIGSTOP); err != nil {
				return err
			}
			// A zombie: it wakes long after the reaper took its batch.
			time.AfterFunc(cfg.TakeoverMinIdle*5/2, func() { _ = w.Signal(syscall.SIGCONT) })
			if err := killWorker(0)(); err != nil {
				return err
			}
			time.Sleep(1700 * time.Millisecond)
			return s.MariaDB.Start()
		}},
		{0.12, "kill -9 the reaper", func() error { f.ReaperKills++; return s.RestartReaper() }},
		{0.1, "kill -9 worker 0 mid-batch", killWorker(0)},
		{0.1, redisFault, func() error {
			f.RedisKills++
			if s.Cluster != nil {
				victim, took, err := s.KillLaggingVoucherMaster(ctx, voucher, lag)
				if err != nil {
					return err
				}
				logf("master %s killed; its replica serves its slots after %s", victim.Addr, took.Round(time.Millisecond))
				return victim.Start() // it rejoins as a replica
			}
			if err := s.Redis.Kill(); err != nil {
				return err
			}
			time.Sleep(500 * time.Millisecond)
			return s.Redis.Start()
		}},
		{0.1, "kill -9 worker 1 mid-batch", killWorker(1)},
		{0.08, "MySQL read-only for 3s, as a managed failover makes it (binaries without SUPER)", func() error {
			f.MySQLReadOnly++
			if err := testsrv.SetReadOnly(s.RootDSN, true); err != nil {
				return err
			}
			time.Sleep(3 * time.Second)
			return testsrv.SetReadOnly(s.RootDSN, false)
		}},
		{0.08, "SIGSTOP mariadbd for 3s (a hung host: connections open, no answers), then SIGCONT", func() error {
			f.MariaDBPauses++
			if err := s.MariaDB.Pause(); err != nil {
				return err
			}
			time.Sleep(3 * time.Second)
			return s.MariaDB.Resume()
		}},
		{0.1, "kill -9 the reaper and worker 0 together", func() error {
			f.ReaperKills++
			if err := s.RestartReaper(); err != nil {
				return err
			}
			return killWorker(0)()
		}},
	}
	for _, st := range steps {
		if err := at(st.wait); err != nil {
			return err
		}
		logf("fault: %s", st.name)
		if err := st.do(); err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
	}
	return nil
}

// waitQuiescent waits until every stream is drained and acknowledged, no
// order awaits payment, no release is owed to Redis and every envelope
// sale is refunded.
func waitQuiescent(ctx context.Context, s *Stack, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var why string
	for time.Now().Before(deadline) {
		var drained bool
		if drained, why = s.Drained(ctx); drained {
			var created, owed, unrefunded int64
			s.DB.DB().WithContext(ctx).Raw("SELECT COUNT(*) FROM orders WHERE status = 'created' AND voucher_id NOT IN (SELECT id FROM vouchers WHERE allocation = 'draw')").Scan(&created)
			s.DB.DB().WithContext(ctx).Raw("SELECT COUNT(*) FROM releases WHERE redis_released_at IS NULL").Scan(&owed)
			s.DB.DB().WithContext(ctx).Raw("SELECT COUNT(*) FROM vouchers WHERE kind = 'envelope' AND refunded_at IS NULL").Scan(&unrefunded)
			if created == 0 && owed == 0 && unrefunded == 0 {
				return nil
			}
			why = fmt.Sprintf("%d orders awaiting payment, %d releases owed, %d envelope sales not refunded", created, owed, unrefunded)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("not quiescent after %s: %s (logs in %s)", timeout, why, filepath.Dir(s.Gateway.LogPath))
}

func (r *ChaosReport) check(ctx context.Context, s *Stack, v int64, paid map[int64]bool, cfgSinks *Sinks) error {
	var rows []struct {
		ID       int64
		UserID   string
		Status   string
		Quantity int64
	}
	if err := s.DB.DB().WithContext(ctx).Raw("SELECT id, user_id, status, quantity FROM orders WHERE voucher_id = ?", v).Scan(&rows).Error; err != nil {
		return err
	}
	status := make(map[int64]string, len(rows))
	perUser := map[string]int64{}
	for _, row := range rows {
		status[row.ID] = row.Status
		if order.Status(row.Status).IsLive() {
			r.Live += row.Quantity // units: an order may take several
			perUser[row.UserID] += row.Quantity
		}
		if _, ok := r.Sale.Orders[row.ID]; !ok {
			r.Unannounced++
		}
	}
	for id := range r.Sale.Orders {
		st, ok := status[id]
		if !ok {
			r.Lost++
			continue
		}
		r.Final[order.Status(st)]++
	}
	// A 202 order may fail only for a verdict on it (no unit left in
	// MySQL, the user's limit); dead-lettering one, or handing its item
	// out twice, is a failure nobody asked for, which an outage must never
	// cause. Every sale of the run counts.
	if err := s.DB.DB().WithContext(ctx).Raw(`SELECT COUNT(*) FROM orders WHERE status = 'failed'
		AND reason NOT IN ?`, []string{db.ReasonOutOfStock, db.ReasonUserLimit}).Scan(&r.FailedByFault).Error; err != nil {
		return err
	}
	// Payments of every sale of the run (codes are paid too).
	ids := make([]int64, 0, len(paid))
	for id := range paid {
		ids = append(ids, id)
	}
	for i := 0; i < len(ids); i += 1000 {
		var n int64
		if err := s.DB.DB().WithContext(ctx).Raw("SELECT COUNT(*) FROM orders WHERE id IN ? AND status = 'paid'", ids[i:min(i+1000, len(ids))]).
			Scan(&n).Error; err != nil {
			return err
		}
		r.PaidAckedLost += int64(min(i+1000, len(ids))-i) - n
	}
	for _, n := range perUser {
		if n > r.PerUser {
			r.UsersOverLimit++
		}
	}
	vo, err := s.DB.Voucher(ctx, v)
	if err != nil {
		return err
	}
	r.MySQLRemaining = vo.Stock
	if r.RedisRemaining, _, err = s.RDB.RemainingStock(ctx, v); err != nil {
		return err
	}
	for p := range s.RDB.Partitions() {
		b, err := s.RDB.PartitionBacklog(ctx, p)
		if err != nil {
			return err
		}
		r.PendingEntries += b.Pending
		dead, err := s.RDB.Client().XRange(ctx, rdb.DeadKey(p), "-", "+").Result()
		if err != nil {
			return err
		}
		for _, d := range dead {
			r.DeadLetters++
			id, _ := strconv.ParseInt(fmt.Sprint(d.Values["order_id"]), 10, 64)
			var done int64
			s.DB.DB().WithContext(ctx).Raw(`SELECT COUNT(*) FROM orders o JOIN releases r ON r.order_id = o.id
				WHERE o.id = ? AND o.status = 'failed' AND r.redis_released_at IS NOT NULL`, id).Scan(&done)
			if done != 1 {
				r.DeadUnexplained++
			}
		}
	}
	rounds, err := sumLogFields(filepath.Join(s.LogDir(), "reaper.log"), "reaper round", "taken_over", "cancelled", "dead_lettered", "consumers_removed")
	if err != nil {
		return err
	}
	r.ReaperTookOver, r.ReaperCancelled, r.ReaperDeadLettered, r.ReaperConsumersRemoved = rounds[0], rounds[1], rounds[2], rounds[3]
	if r.ReadOnlyRefusals, err = countLogLines(s.LogDir(), "--read-only option"); err != nil {
		return err
	}
	checks, err := reaper.Reconcile(ctx, s.RDB, s.DB, time.Now(), false)
	if err != nil {
		return err
	}
	for _, c := range checks {
		r.ReconcileDiffs += len(c.Differences)
	}
	if r.EventsMissing, r.EventsDuplicated, r.EventsNotLast, err = s.EventProblems(ctx, 0); err != nil {
		return err
	}
	if err := s.EventSequence(ctx, time.Minute); err != nil {
		r.EventSequence = err.Error()
	}
	if r.sinks = cfgSinks != nil; r.sinks {
		if r.SinkProblems, r.WebhookDuplicates, r.KafkaDuplicates, err = cfgSinks.check(ctx, s, time.Minute); err != nil {
			return err
		}
	}
	return nil
}

// Violations lists every invariant the run broke; empty means all hold.
func (r *ChaosReport) Violations() []string {
	var v []string
	add := func(cond bool, format string, args ...any) {
		if cond {
			v = append(v, fmt.Sprintf(format, args...))
		}
	}
	add(r.Lost > r.ReplicationLost, "%d admitted orders lost", r.Lost-r.ReplicationLost)
	add(r.durability == "replica" && r.ReplicationLost > 0, "%d admitted orders lost with a killed master though each waited for a replica", r.ReplicationLost)
	add(r.Final[order.StatusCreated] > 0, "%d orders still awaiting payment after quiescence", r.Final[order.StatusCreated])
	// Ambiguous: no answer or outcome_unknown; a 503 unavailable never ran.
	add(r.Unannounced > r.Sale.OutcomeUnknown+r.Sale.Errors, "%d orders without a 202, more than the %d ambiguous answers", r.Unannounced, r.Sale.OutcomeUnknown+r.Sale.Errors)
	add(r.PaidAckedLost > 0, "%d acknowledged payments not in MySQL", r.PaidAckedLost)
	add(r.CancelAckedLost > 0, "%d acknowledged buyer cancels not cancelled in MySQL", r.CancelAckedLost)
	add(r.Live > r.StockTotal, "oversold: %d live units for %d in stock", r.Live, r.StockTotal)
	add(r.UsersOverLimit > 0, "%d users above the limit", r.UsersOverLimit)
	add(r.MySQLRemaining+r.Live != r.StockTotal, "MySQL remaining %d + live %d != total %d", r.MySQLRemaining, r.Live, r.StockTotal)
	add(r.RedisRemaining != r.MySQLRemaining, "Redis remaining %d != MySQL remaining %d", r.RedisRemaining, r.MySQLRemaining)
	add(r.PendingEntries > 0, "%d entries still pending", r.PendingEntries)
	add(r.DeadUnexplained > 0, "%d dead letters without a failed order and a done release", r.DeadUnexplained)
	add(r.FailedByFault > 0, "%d orders failed by a fault (dead-lettered), not for stock or the limit", r.FailedByFault)
	add(r.ReconcileDiffs > 0, "reconcile finds %d differences between Redis and MySQL", r.ReconcileDiffs)
	add(r.EventsMissing > 0, "%d orders' status has no event", r.EventsMissing)
	add(r.EventsDuplicated > 0, "%d statuses of an order have more than one event", r.EventsDuplicated)
	add(r.EventsNotLast > 0, "%d orders' last event is not their status", r.EventsNotLast)
	add(r.EventSequence != "", "%s", r.EventSequence)
	for _, p := range r.SinkProblems {
		v = append(v, "events' sinks: "+p)
	}
	for _, side := range r.Side {
		for _, s := range side.ViolationsUnderFaults() {
			v = append(v, side.Kind+" sale: "+s)
		}
	}
	if r.Draw != nil {
		for _, s := range r.Draw.ViolationsUnderFaults() {
			v = append(v, "draw sale: "+s)
		}
	}
	return v
}

// Print writes the report as a table.
func (r *ChaosReport) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	f := r.Faults
	row("faults injected", fmt.Sprintf("worker kill -9: %d, worker SIGSTOP: %d (mid-batch: %d), reaper kill -9: %d, mariadbd kill -9: %d, redis-server kill -9: %d, MySQL read-only: %d, mariadbd SIGSTOP: %d",
		f.WorkerKills, f.WorkerStops, f.MidBatch, f.ReaperKills, f.MariaDBKills, f.RedisKills, f.MySQLReadOnly, f.MariaDBPauses))
	row("claims / admitted (202)", fmt.Sprintf("%d / %d", r.Sale.Requests, r.Sale.Admitted))
	row("claims 503 unavailable / outcome_unknown / errors", fmt.Sprintf("%d / %d / %d", r.Sale.Unavailable, r.Sale.OutcomeUnknown, r.Sale.Errors))
	row("202 orders: paid / cancelled / failed / created", fmt.Sprintf("%d / %d / %d / %d",
		r.Final[order.StatusPaid], r.Final[order.StatusCancelled], r.Final[order.StatusFailed], r.Final[order.StatusCreated]))
	row("202 orders lost", r.Lost)
	if r.ReplicationLost > 0 || r.Repaired {
		row("of which lost with a killed master's unreplicated writes", r.ReplicationLost)
		row("reconcile --repair needed after the failover", r.Repaired)
	}
	row("orders without a 202 (reply lost)", r.Unannounced)
	row("payments acknowledged / lost / too late", fmt.Sprintf("%d / %d / %d", r.PaidAcked, r.PaidAckedLost, r.PayTooLate))
	row("buyer cancels acknowledged / lost / by the buyer (not expired first)", fmt.Sprintf("%d / %d / %d", r.CancelAcked, r.CancelAckedLost, r.CancelledByBuyer))
	row("live units / stock total", fmt.Sprintf("%d / %d", r.Live, r.StockTotal))
	row("users over limit", r.UsersOverLimit)
	row("remaining MySQL / Redis", fmt.Sprintf("%d / %d", r.MySQLRemaining, r.RedisRemaining))
	row("pending entries", r.PendingEntries)
	row("dead letters (unexplained)", fmt.Sprintf("%d (%d)", r.DeadLetters, r.DeadUnexplained))
	row("orders failed by a fault", r.FailedByFault)
	row("log lines: writes refused by read_only", r.ReadOnlyRefusals)
	row("reaper: taken over / cancelled / dead-lettered / consumers removed", fmt.Sprintf("%d / %d / %d / %d",
		r.ReaperTookOver, r.ReaperCancelled, r.ReaperDeadLettered, r.ReaperConsumersRemoved))
	row("reconcile differences", r.ReconcileDiffs)
	if r.sinks {
		row("events: sinks' problems / duplicates webhook, kafka", fmt.Sprintf("%d / %d, %d", len(r.SinkProblems), r.WebhookDuplicates, r.KafkaDuplicates))
	}
	row("quiescent after sale", r.Quiescence.Round(time.Millisecond))
	for _, side := range r.Side {
		row(side.Kind+" sale: claims / admitted / 503 or errors", fmt.Sprintf("%d / %d / %d", side.Sale.Requests, side.Sale.Admitted, side.Sale.Unavailable+side.Sale.OutcomeUnknown+side.Sale.Errors))
		row(side.Kind+" sale: live orders / failed / cancelled / lost", fmt.Sprintf("%d / %d / %d / %d", side.Live, side.Failed, side.Cancelled, side.Missing))
		row(side.Kind+" sale: live orders sharing an item", side.ItemsShared)
		row(side.Kind+" sale: remaining MySQL / Redis", fmt.Sprintf("%d / %d", side.MySQLRemaining, side.RedisRemaining))
		if side.TotalAmount > 0 {
			a := side.Amounts
			row(side.Kind+" sale: grabbed + remaining + refunded = total", fmt.Sprintf("%d + %d + %d = %d (of %d)",
				a.Grabbed, a.Remaining, a.Refunded, a.Grabbed+a.Remaining+a.Refunded, side.TotalAmount))
		}
	}
	if d := r.Draw; d != nil {
		row("draw sale: entries tried / admitted / 503 or errors", fmt.Sprintf("%d / %d / %d", d.Sale.Requests, d.Sale.Admitted, d.Sale.Unavailable+d.Sale.OutcomeUnknown+d.Sale.Errors))
		row("draw sale: entries in MySQL / missing / failed", fmt.Sprintf("%d / %d / %v", d.Entries, d.Missing, d.Failed))
		row("draw sale: winners / lost (want min(stock, entries))", fmt.Sprintf("%d / %d (%d)", d.Winners, d.Lost, d.WinnersWanted))
		row("draw sale: reapers killed while the draw was due", d.ReaperKills)
		row("draw sale: reaper draw verify", fmt.Sprintf("exit %d", d.VerifyExit))
	}
	if v := r.Violations(); len(v) == 0 {
		row("invariants", "all hold")
	} else {
		row("invariants", "VIOLATED: "+strings.Join(v, "; "))
	}
	tw.Flush()
}

// sumLogFields sums numeric fields of the JSON log lines with message msg.
func sumLogFields(path, msg string, fields ...string) ([]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(fields))
	for _, line := range strings.Split(string(b), "\n") {
		var entry map[string]any
		if json.Unmarshal([]byte(line), &entry) != nil || entry["msg"] != msg {
			continue
		}
		for i, f := range fields {
			if n, ok := entry[f].(float64); ok {
				out[i] += int64(n)
			}
		}
	}
	return out, nil
}

// countLogLines counts the lines containing substr in every log of dir.
func countLogLines(dir, substr string) (int64, error) {
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return 0, err
	}
	var n int64
	for _, path := range logs {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, err
		}
		n += int64(strings.Count(string(b), substr))
	}
	return n, nil
}
