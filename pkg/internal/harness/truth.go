package harness

// A sale through Redis freezes, every answer held to MySQL's truth: the
// fault test of "every answer is the truth" and make bench's freeze row.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// FreezeConfig is a sale of one claim per user, from Conns connections,
// half of them with an Idempotency-Key, through Freezes: Redis frozen
// (SIGSTOP: connections open, nothing answered), or another fault, for
// each duration in turn, after 100 answers and until 100 more.
type FreezeConfig struct {
	Voucher int64
	Conns   int
	Freezes []time.Duration
	// Freeze makes the fault for d; nil: freezes the stack's single Redis.
	Freeze func(d time.Duration) error
	// Logf, when set, is told each phase as it ends, with its time: where
	// a run's minutes go.
	Logf func(format string, args ...any)
	// Twice: each buyer sends two claims at once (a double-click), with
	// one Idempotency-Key for both when keyed: with a per-user limit of
	// one, one of them is admitted, and each claim must be told its own
	// truth (the claim whose serial the order carries is the admitted
	// one).
	Twice bool
}

// FreezeReport is what the buyers were told, and how it compares with
// MySQL once the pipeline settled.
type FreezeReport struct {
	Answers        map[string]int `json:"answers"`         // by "STATUS CODE", "no answer"
	OutcomeUnknown int            `json:"outcome_unknown"` // 503 outcome_unknown answers
	Resolved       int            `json:"resolved"`        // of them, resolved by their claim_id
	ResolvedOrders int            `json:"resolved_admitted"`
	// Misled: claims told not admitted that hold an order, or told
	// admitted without it (or with another).
	Misled  []string `json:"misled"`
	Elapsed float64  `json:"resolve_seconds"` // asking every claim_id, one after another, until each was known
	// Money: an envelope sale's amounts the buyers were told (202s and
	// resolutions), and those MySQL's live orders hold.
	MoneyTold int64 `json:"money_told"`
	MoneyHeld int64 `json:"money_held"`
}

type freezeAnswer struct {
	user, key, code, order, claimID, resolved string
	status                                    int
	amount                                    int64
}

// SaleThroughFreezes runs cfg's sale, resolves each outcome_unknown by
// its claim_id, waits for the pipeline to drain and compares every
// answer with MySQL.
func (s *Stack) SaleThroughFreezes(ctx context.Context, cfg FreezeConfig) (*FreezeReport, error) {
	freeze := cfg.Freeze
	if freeze == nil {
		freeze = func(d time.Duration) error {
			if err := s.Redis.Pause(); err != nil {
				return err
			}
			time.Sleep(d) // the fault's length, not a wait for anything
			return s.Redis.Resume()
		}
	}
	phase := time.Now()
	logf := func(what string, args ...any) {
		if cfg.Logf != nil {
			cfg.Logf("%s: %s", fmt.Sprintf(what, args...), time.Since(phase).Round(time.Millisecond))
		}
		phase = time.Now()
	}
	vid := strconv.FormatInt(cfg.Voucher, 10)
	client := NewClient(s.URL, cfg.Conns)
	var mu sync.Mutex
	var answers []*freezeAnswer
	var next, answered atomic.Int64
	claim := func(i int64) int {
		a := &freezeAnswer{user: "u" + strconv.FormatInt(i, 10)}
		if i%2 == 0 {
			a.key = "k-" + a.user
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		send := func(a *freezeAnswer) int {
			var body struct {
				Code    string `json:"error"`
				OrderID string `json:"order_id"`
				ClaimID string `json:"claim_id"`
				Amount  int64  `json:"amount"`
			}
			status, err := client.Do(cctx, "POST", "/v1/vouchers/"+vid+"/orders", s.Token(a.user), nil, &body, "Idempotency-Key", a.key)
			if err != nil {
				status = 0
			}
			a.status, a.code, a.order, a.claimID, a.amount = status, body.Code, body.OrderID, body.ClaimID, body.Amount
			mu.Lock()
			answers = append(answers, a)
			mu.Unlock()
			answered.Add(1)
			return status
		}
		if cfg.Twice {
			twin := &freezeAnswer{user: a.user, key: a.key}
			done := make(chan struct{})
			go func() { defer close(done); send(twin) }()
			defer func() { <-done }()
		}
		return send(a)
	}
	until := func(n int64) error {
		for deadline := time.Now().Add(time.Minute); answered.Load() < n; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				return fmt.Errorf("%d answers of %d in a minute", answered.Load(), n)
			}
		}
		return nil
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range cfg.Conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if claim(next.Add(1)) == 0 {
					time.Sleep(10 * time.Millisecond) // no gateway to answer: paces the clients
				}
			}
		}()
	}
	err := func() error {
		for _, d := range cfg.Freezes {
			if err := until(answered.Load() + 100); err != nil {
				return err
			}
			logf("100 answers before the %s freeze", d)
			if err := freeze(d); err != nil {
				return err
			}
			logf("the %s freeze", d)
			if err := until(answered.Load() + 100); err != nil {
				return err
			}
			logf("100 answers after it")
		}
		return nil
	}()
	close(stop)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	logf("the claims in flight answered")

	rep := &FreezeReport{Answers: map[string]int{}}
	start := time.Now()
	for _, a := range answers {
		if a.status != 503 || a.code != "outcome_unknown" {
			continue
		}
		rep.OutcomeUnknown++
		if a.claimID == "" {
			rep.Misled = append(rep.Misled, a.user+": outcome_unknown without a claim_id")
			continue
		}
		// Asked at once; a pause only after an answer that does not know
		// yet (a pause after every claim was most of this test's time).
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			var out struct {
				Status  string `json:"status"`
				OrderID string `json:"order_id"`
				Amount  int64  `json:"amount"`
			}
			status, err := client.Do(ctx, "GET", "/v1/vouchers/"+vid+"/claims/"+a.claimID, s.Token(a.user), nil, &out)
			if err == nil && status == 200 && out.Status != "unknown" {
				a.resolved, a.order, a.amount = out.Status, out.OrderID, out.Amount
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("claim %s of %s unresolved after 90 s", a.claimID, a.user)
			}
		}
		rep.Resolved++
		if a.resolved == "admitted" {
			rep.ResolvedOrders++
		}
	}
	rep.Elapsed = time.Since(start).Seconds()
	logf("%d outcome_unknown claims resolved", rep.OutcomeUnknown)
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if ok, _ := s.Drained(ctx); ok {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("not drained after 90 s")
		}
	}
	logf("drained")
	var live []struct {
		ID          int64
		UserID      string
		Amount      int64
		ClaimSerial uint64
	}
	if err := s.DB.DB().WithContext(ctx).Raw("SELECT id, user_id, amount, claim_serial FROM orders WHERE voucher_id = ? AND status IN ('created', 'paid', 'completed')",
		cfg.Voucher).Scan(&live).Error; err != nil {
		return nil, err
	}
	held, amounts, serials := map[string]int64{}, map[string]int64{}, map[string]uint64{}
	for _, o := range live {
		if held[o.UserID] != 0 {
			rep.Misled = append(rep.Misled, fmt.Sprintf("%s holds two orders", o.UserID))
		}
		held[o.UserID], amounts[o.UserID], serials[o.UserID] = o.ID, o.Amount, o.ClaimSerial
		rep.MoneyHeld += o.Amount
	}
	told, unanswered := map[string]bool{}, map[string]bool{}
	for _, a := range answers {
		what := strconv.Itoa(a.status) + " " + a.code
		if a.status == 0 {
			what = "no answer"
		}
		rep.Answers[what]++
		admitted := a.status == 202 || a.resolved == "admitted"
		if admitted && !told[a.user] {
			rep.MoneyTold += a.amount // once a buyer: a keyed twin is told the same envelope
		}
		// An unkeyed claim answered outcome_unknown made the buyer's order
		// if the order carries its serial.
		own := a.key == "" && a.resolved != "" && claimSerial(a.claimID) == serials[a.user] && held[a.user] != 0
		switch {
		case a.status == 0: // nothing was told
			unanswered[a.user] = true
		case admitted && strconv.FormatInt(held[a.user], 10) != a.order:
			rep.Misled = append(rep.Misled, fmt.Sprintf("%s told admitted (%s %s, order %s) holds order %d", a.user, what, a.resolved, a.order, held[a.user]))
		case admitted && a.amount != amounts[a.user]:
			rep.Misled = append(rep.Misled, fmt.Sprintf("%s told %d, holds an envelope of %d", a.user, a.amount, amounts[a.user]))
		case admitted && a.key == "" && a.resolved != "" && !own:
			rep.Misled = append(rep.Misled, fmt.Sprintf("%s's claim %s told admitted, its twin's order %d", a.user, a.claimID, held[a.user]))
		case admitted:
			told[a.user] = true
		case own:
			rep.Misled = append(rep.Misled, fmt.Sprintf("%s's claim %s told %s, its order %d", a.user, a.claimID, a.resolved, held[a.user]))
		case !cfg.Twice && held[a.user] != 0:
			rep.Misled = append(rep.Misled, fmt.Sprintf("%s told not admitted (%s %s) holds order %d", a.user, what, a.resolved, held[a.user]))
		}
	}
	if cfg.Twice {
		// One claim of two was admitted: the buyer holding an order was
		// told so by one of them, unless one got no answer.
		for user, id := range held {
			if !told[user] && !unanswered[user] {
				rep.Misled = append(rep.Misled, fmt.Sprintf("%s holds order %d, told of it by neither claim", user, id))
			}
		}
	}
	return rep, nil
}

// claimSerial is the serial a claim id names (MS.HORIZON.SERIAL.MAC[.KEY]),
// 0 for none.
func claimSerial(id string) uint64 {
	parts := strings.Split(id, ".")
	if len(parts) < 4 {
		return 0
	}
	n, _ := strconv.ParseUint(parts[2], 16, 64)
	return n
}
