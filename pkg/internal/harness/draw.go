package harness

// A draw sale end to end with the real binaries: entries through the
// gateway, persisted by the workers, drawn by the reaper, verified by
// "reaper draw verify".

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/draw"
	"github.com/flashsale/flashsale/pkg/order"
)

// DrawConfig shapes a draw sale.
type DrawConfig struct {
	Kind        string // units (default) or codes
	Stock       int64
	Users       int
	Requests    int // entries tried in all (beyond Users: repeats, answered already_entered)
	Concurrency int
	// Window is how long entries stay open from the voucher's creation:
	// the sale must be over by then (later claims answer ended).
	Window time.Duration
	Seed   uint64
}

// DrawReport is a draw sale checked against its invariants.
type DrawReport struct {
	VoucherID int64
	Stock     int64
	Sale      *SaleResult
	// MySQL after the entries: persisted entries, 202 entry ids not in
	// MySQL, MySQL entries no 202 announced, users with two entries, and
	// the stock left (entries take none).
	Entries, Missing, Unexpected, UsersTwice int64
	StockAtClose                             int64
	// After the draw.
	Winners, Lost, Undecided int64
	WinnersWanted            int64 // min(stock, entries)
	EndsAt, DrawnAt          time.Time
	// Waited: from the end of the entries until the API said drawn (the
	// drawer's grace and interval included).
	Waited time.Duration
	// The commitment and the seed the API showed, and whether they match.
	Commitment, Seed string
	CommitmentHolds  bool
	Verify           string // reaper draw verify's output
	VerifyExit       int
	// Failed entries by reason (none is expected but under faults that
	// lose Redis's state); ReaperKills: reapers killed while the draw was
	// due (a chaos run's).
	Failed      map[string]int64
	ReaperKills int
}

// RunDraw creates a draw sale, fires the entries, waits for them in
// MySQL and for the end, has the reaper draw it (starting one if the
// stack has none) and runs "reaper draw verify".
func (s *Stack) RunDraw(ctx context.Context, cfg DrawConfig) (*DrawReport, error) {
	ends := time.Now().Add(cfg.Window).UTC().Truncate(time.Millisecond)
	spec := VoucherSpec{Name: "draw", Kind: cfg.Kind, PerUserLimit: 1, EndsAt: ends.Format(time.RFC3339Nano), Allocation: draw.Draw, PaymentTimeoutSeconds: 600}
	if cfg.Kind == "codes" {
		spec.Codes = Codes(int(cfg.Stock))
	} else {
		spec.Stock = cfg.Stock
	}
	v, err := s.CreateVoucher(ctx, spec)
	if err != nil {
		return nil, err
	}
	r := &DrawReport{VoucherID: v, Stock: cfg.Stock, EndsAt: ends}
	watch := s.WatchPersisted(ctx, v)
	if r.Sale, err = s.RunSale(ctx, SaleConfig{VoucherID: v, Users: cfg.Users, Requests: cfg.Requests, Concurrency: cfg.Concurrency, Seed: cfg.Seed}); err != nil {
		return r, err
	}
	if _, err := watch.Wait(ctx, r.Sale.Admitted, 2*time.Minute); err != nil {
		return r, err
	}
	if s.Reaper == nil {
		if s.Reaper, err = s.StartReaper("FLASHSALE_REAPER_REFUND_INTERVAL=250ms"); err != nil {
			return r, err
		}
	}
	return r, s.finishDraw(ctx, r)
}

// EndDrawNow moves the end of draw voucher v's entries to a second from
// now (PATCH ends_at, as an operator would), and returns it.
func (s *Stack) EndDrawNow(ctx context.Context, v int64) (time.Time, error) {
	ends := time.Now().Add(time.Second).UTC().Truncate(time.Millisecond)
	status, err := NewClient(s.URL, 1).Do(ctx, "PATCH", "/admin/v1/vouchers/"+strconv.FormatInt(v, 10), s.AdminToken,
		map[string]string{"ends_at": ends.Format(time.RFC3339Nano)}, nil)
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("end draw %d: status %d", v, status)
	}
	return ends, err
}

// KillReaperWhileDrawDue kills the reaper (SIGKILL) and starts it again
// every interval from the end of draw voucher v's entries until it is
// drawn (at most 20 times), and returns how many times it did: a reaper
// may die before, during or after the draw.
func (s *Stack) KillReaperWhileDrawDue(ctx context.Context, v int64, ends time.Time, every time.Duration) (int, error) {
	select {
	case <-time.After(time.Until(ends)):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	kills := 0
	for kills < 20 && s.drawState(ctx, v) != draw.StateDrawn {
		if err := s.RestartReaper(); err != nil {
			return kills, err
		}
		kills++
		time.Sleep(every)
	}
	return kills, nil
}

// finishDraw checks the entries of r's sale (all persisted by now), waits
// for the draw and verifies it.
func (s *Stack) finishDraw(ctx context.Context, r *DrawReport) error {
	if err := s.checkEntries(ctx, r); err != nil {
		return err
	}
	if err := s.waitDrawn(ctx, r, time.Now().Add(2*time.Minute)); err != nil {
		return err
	}
	var err error
	r.Verify, err = s.RunOutputEnv(ctx, s.RoleEnv("reaper"), "reaper", "draw", "verify", strconv.FormatInt(r.VoucherID, 10))
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.VerifyExit = exit.ExitCode()
	case err != nil:
		return err
	}
	return s.countDraw(ctx, r)
}

// drawState is voucher v's draw state in MySQL ("" if unreadable).
func (s *Stack) drawState(ctx context.Context, v int64) string {
	var st string
	_ = s.DB.DB().WithContext(ctx).Raw("SELECT draw_state FROM vouchers WHERE id = ?", v).Scan(&st).Error
	return st
}

// checkEntries compares the 202s with MySQL's entries, before the draw.
func (s *Stack) checkEntries(ctx context.Context, r *DrawReport) error {
	var rows []struct {
		ID     int64
		UserID string
		Status string
		Reason string
	}
	if err := s.DB.DB().WithContext(ctx).Raw("SELECT id, user_id, status, reason FROM orders WHERE voucher_id = ?", r.VoucherID).Scan(&rows).Error; err != nil {
		return err
	}
	seen := map[int64]bool{}
	perUser := map[string]int{}
	r.Failed = map[string]int64{}
	for _, row := range rows {
		seen[row.ID] = true
		if row.Status == string(order.StatusFailed) {
			r.Failed[row.Reason]++
			continue
		}
		r.Entries++
		if perUser[row.UserID]++; perUser[row.UserID] == 2 {
			r.UsersTwice++
		}
		if _, ok := r.Sale.Orders[row.ID]; !ok {
			r.Unexpected++
		}
	}
	for id := range r.Sale.Orders {
		if !seen[id] {
			r.Missing++
		}
	}
	v, err := s.DB.Voucher(ctx, r.VoucherID)
	r.StockAtClose = v.Stock + v.DrawWinners // what the winners took, if drawn already
	return err
}

// waitDrawn polls the draw through the API until it is drawn.
func (s *Stack) waitDrawn(ctx context.Context, r *DrawReport, deadline time.Time) error {
	client := NewClient(s.URL, 1)
	tok := s.Token("observer")
	path := "/v1/vouchers/" + strconv.FormatInt(r.VoucherID, 10) + "/draw"
	for {
		var body struct {
			State          string    `json:"state"`
			Seed           string    `json:"seed"`
			SeedCommitment string    `json:"seed_commitment"`
			DrawnAt        time.Time `json:"drawn_at"`
		}
		status, err := client.Do(ctx, "GET", path, tok, nil, &body)
		if err == nil && status == http.StatusOK && body.State == draw.StateDrawn {
			r.Waited, r.DrawnAt, r.Seed, r.Commitment = time.Since(r.EndsAt), body.DrawnAt, body.Seed, body.SeedCommitment
			seed, err := draw.ParseSeed(body.Seed)
			r.CommitmentHolds = err == nil && seed.Commitment() == body.SeedCommitment
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("voucher %d not drawn by %s (last: %d %s %v)", r.VoucherID, deadline.Format(time.TimeOnly), status, body.State, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// countDraw reads the outcome of the draw from MySQL; the losers are
// marked right after the winners, so it waits for them.
func (s *Stack) countDraw(ctx context.Context, r *DrawReport) error {
	r.WinnersWanted = min(r.StockAtClose, r.Entries)
	deadline := time.Now().Add(time.Minute)
	for {
		var counts []struct {
			Status string
			Drawn  int
			N      int64
		}
		if err := s.DB.DB().WithContext(ctx).Raw("SELECT status, drawn, COUNT(*) AS n FROM orders WHERE voucher_id = ? GROUP BY status, drawn", r.VoucherID).
			Scan(&counts).Error; err != nil {
			return err
		}
		r.Winners, r.Lost, r.Undecided = 0, 0, 0
		for _, c := range counts {
			switch {
			case c.Drawn == 1:
				r.Winners += c.N
			case c.Status == string(order.StatusLost):
				r.Lost += c.N
			case c.Status == string(order.StatusEntered):
				r.Undecided += c.N
			}
		}
		if r.Undecided == 0 || time.Now().After(deadline) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Violations lists the invariants the draw broke.
func (r *DrawReport) Violations() []string { return r.violations(false) }

// ViolationsUnderFaults is Violations for a run under faults: a claim may
// be answered 5xx or not at all, and an entry a second 202 refused in
// MySQL (a Redis failover that lost the first).
func (r *DrawReport) ViolationsUnderFaults() []string { return r.violations(true) }

func (r *DrawReport) violations(faults bool) []string {
	var out []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			out = append(out, fmt.Sprintf(format, args...))
		}
	}
	check(r.Missing == 0, "%d entries answered 202 are not in MySQL", r.Missing)
	// Under faults an entry may be persisted though its answer was a 503
	// or never arrived: no more of them than such ambiguous answers.
	ambiguous := int64(0)
	if faults {
		ambiguous = r.Sale.OutcomeUnknown + r.Sale.Errors // a 503 unavailable never ran
	}
	check(r.Unexpected <= ambiguous, "%d entries in MySQL no 202 announced (%d ambiguous answers)", r.Unexpected, ambiguous)
	check(r.UsersTwice == 0, "%d users entered twice", r.UsersTwice)
	var failed int64
	for reason, n := range r.Failed {
		failed += n
		check(faults && reason == db.ReasonUserLimit, "%d entries failed in MySQL: %s", n, reason)
	}
	check(r.Entries+failed >= r.Sale.Admitted, "%d entries in MySQL (and %d failed), %d answered 202", r.Entries, failed, r.Sale.Admitted)
	check(r.StockAtClose == r.Stock, "entries took stock: %d of %d left", r.StockAtClose, r.Stock)
	check(r.Winners == r.WinnersWanted, "%d winners, want min(stock, entries) = %d", r.Winners, r.WinnersWanted)
	check(r.Winners+r.Lost == r.Entries, "%d winners + %d lost for %d entries (%d undecided)", r.Winners, r.Lost, r.Entries, r.Undecided)
	check(r.CommitmentHolds, "the revealed seed is not the one committed to")
	check(r.VerifyExit == 0, "reaper draw verify exited %d", r.VerifyExit)
	check(faults || r.Sale.Errors == 0, "%d transport errors or 5xx", r.Sale.Errors)
	return out
}

// Print writes the report.
func (r *DrawReport) Print(w io.Writer) {
	fmt.Fprintf(w, "draw voucher                  %d: %d units\n", r.VoucherID, r.Stock)
	fmt.Fprintf(w, "entries tried                 %d in %s (%.0f/s), %d admitted, refused: %s\n", r.Sale.Requests,
		r.Sale.Duration.Round(time.Millisecond), float64(r.Sale.Requests)/r.Sale.Duration.Seconds(), r.Sale.Admitted, byCode(r.Sale.Rejected))
	fmt.Fprintf(w, "entries in MySQL              %d (missing %d, unexpected %d, users twice %d); stock left %d\n",
		r.Entries, r.Missing, r.Unexpected, r.UsersTwice, r.StockAtClose)
	fmt.Fprintf(w, "winners / lost                %d / %d (want min(stock, entries) = %d)\n", r.Winners, r.Lost, r.WinnersWanted)
	fmt.Fprintf(w, "drawn                         %s after the entries closed (2 s grace and the reaper's interval included); drawn_at − ends_at %s\n",
		r.Waited.Round(time.Millisecond), r.DrawnAt.Sub(r.EndsAt).Round(time.Millisecond))
	fmt.Fprintf(w, "seed commitment               %s\nseed                          %s (commitment holds: %v)\n", r.Commitment, r.Seed, r.CommitmentHolds)
	if len(r.Failed) > 0 || r.ReaperKills > 0 {
		fmt.Fprintf(w, "failed entries                %v; reapers killed while the draw was due %d\n", r.Failed, r.ReaperKills)
	}
	fmt.Fprintf(w, "reaper draw verify            exit %d\n", r.VerifyExit)
	for _, line := range strings.Split(strings.TrimSpace(r.Verify), "\n") {
		fmt.Fprintf(w, "    %s\n", line)
	}
}

// byCode writes counts by code, "already_entered 30000, sold_out 2", or
// "none".
func byCode(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
