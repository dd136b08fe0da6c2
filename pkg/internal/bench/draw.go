package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"time"

	"github.com/flashsale/flashsale/pkg/draw"
	"github.com/flashsale/flashsale/pkg/internal/harness"
)

// DrawRun is a large draw sale's draw, and the gateway's entries beside
// its admitted claims in the same run.
type DrawRun struct {
	Entries int64 `json:"entries"`
	Stock   int64 `json:"stock"`
	// DrawSeconds: closing the entries, ranking them and making the
	// winners' orders (db.Store BeginDraw and Draw, what the reaper's
	// drawer calls); LostSeconds: marking the others lost.
	DrawSeconds float64 `json:"draw_seconds"`
	LostSeconds float64 `json:"mark_lost_seconds"`
	// VerifySeconds and VerifyPeakRSS: "reaper draw verify", the binary.
	VerifySeconds float64 `json:"verify_seconds"`
	VerifyPeakRSS int64   `json:"verify_peak_rss_bytes"`
	VerifyExit    int     `json:"verify_exit"`
	// Entries through the gateway (distinct users, a draw far from its
	// end) and admitted claims, closed loop, same connections, same run,
	// each the mean of two runs alternated with the other's.
	EntriesPerSecond  float64 `json:"entries_per_s"`
	AdmittedPerSecond float64 `json:"admitted_per_s"`
	Conns             int     `json:"conns"`
}

// drawRun measures the gateway's entries against its admitted claims,
// then fills a draw sale of entries entries directly in MySQL (as the
// workers would have, far faster than a sale could) and draws stock
// winners from them, then verifies the draw with the reaper binary.
func drawRun(ctx context.Context, s *harness.Stack, cfg Config, tokens []string, host string) (DrawRun, error) {
	d := DrawRun{Entries: int64(cfg.DrawEntries), Stock: int64(cfg.DrawStock), Conns: cfg.Conns[0]}
	// Alternated, twice each, and averaged: the machine's noise falls on
	// both alike.
	far := time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)
	for round := range 4 {
		allocation := []string{draw.FirstCome, draw.Draw}[round%2]
		vs := harness.VoucherSpec{Name: "entries", Stock: 10_000_000, PerUserLimit: 1, EndsAt: far, Allocation: allocation}
		v, err := s.CreateVoucher(ctx, vs)
		if err != nil {
			return d, err
		}
		path := "/v1/vouchers/" + strconv.FormatInt(v, 10) + "/orders"
		r := Drive(Load{Addr: host, Conns: d.Conns, Duration: cfg.Duration, Next: func(i int64) []byte { return Request(host, path, tokens[i%int64(len(tokens))]) }})
		if allocation == draw.Draw {
			d.EntriesPerSecond += r.RPS() / 2
		} else {
			d.AdmittedPerSecond += r.RPS() / 2
		}
		cfg.logf("gateway %s, %d conns: %.0f/s, status %v", map[string]string{draw.Draw: "entries", draw.FirstCome: "admitted claims"}[allocation], d.Conns, r.RPS(), r.Status)
		if err := resetStreams(ctx, s); err != nil {
			return d, err
		}
	}

	ends := time.Now().Add(time.Minute).UTC().Format(time.RFC3339)
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "big draw", Stock: d.Stock, PerUserLimit: 1, EndsAt: ends, Allocation: draw.Draw, PaymentTimeoutSeconds: 600})
	if err != nil {
		return d, err
	}
	cfg.logf("filling %d entries of draw voucher %d in MySQL", d.Entries, v)
	gdb := s.DB.DB().WithContext(ctx)
	for from := int64(1); from <= d.Entries; from += 100_000 {
		to := min(from+99_999, d.Entries)
		if err := gdb.Exec(fmt.Sprintf(`INSERT INTO orders (id, voucher_id, user_id, day, quantity, status, created_at, expires_at, updated_at)
			SELECT seq * 1024 + 7, ?, CONCAT('u', seq), '20261125', 1, 'entered', UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), UTC_TIMESTAMP(3)
			FROM seq_%d_to_%d`, from, to), v).Error; err != nil {
			return d, err
		}
	}
	now := time.Now().UTC()
	start := time.Now()
	if _, err := s.DB.BeginDraw(ctx, v); err != nil {
		return d, err
	}
	res, err := s.DB.Draw(ctx, v, now)
	if err != nil {
		return d, err
	}
	d.DrawSeconds = time.Since(start).Seconds()
	if res.Winners != min(d.Stock, d.Entries) {
		return d, fmt.Errorf("draw of %d entries for %d units made %d winners", d.Entries, d.Stock, res.Winners)
	}
	start = time.Now()
	for {
		n, err := s.DB.MarkLost(ctx, v, now, 20_000)
		if err != nil {
			return d, err
		}
		if n < 20_000 {
			break
		}
	}
	d.LostSeconds = time.Since(start).Seconds()
	cfg.logf("draw of %d entries for %d units: %.2fs, losers marked in %.2fs more", d.Entries, d.Stock, d.DrawSeconds, d.LostSeconds)

	cmd := s.Command(ctx, "reaper", "draw", "verify", strconv.FormatInt(v, 10))
	cmd.Env = append(cmd.Env, s.RoleEnv("reaper")...)
	cmd.Stdout, cmd.Stderr = io.Discard, cfg.Log
	start = time.Now()
	if err := cmd.Start(); err != nil {
		return d, err
	}
	// VmHWM, polled: a child's rusage counts the memory it shared with
	// this process (600,000 tokens) before its exec.
	stop, done := make(chan struct{}), make(chan struct{})
	var peak int64
	go func() {
		defer close(done)
		for {
			if rss, err := PeakRSS(cmd.Process.Pid); err == nil {
				peak = max(peak, rss)
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	err = cmd.Wait()
	close(stop)
	<-done
	d.VerifyPeakRSS = peak
	d.VerifySeconds = time.Since(start).Seconds()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		d.VerifyExit = exit.ExitCode()
	case err != nil:
		return d, err
	}
	cfg.logf("reaper draw verify: exit %d in %.2fs, peak RSS %d MB", d.VerifyExit, d.VerifySeconds, d.VerifyPeakRSS>>20)
	return d, nil
}

// printDraw writes the draw rows.
func (r *Report) printDraw(w io.Writer) {
	if r.Draw == nil {
		return
	}
	d := r.Draw
	fmt.Fprintf(w, "\ndraw sale (%d conns, same run): entries %.0f/s vs admitted claims %.0f/s (%.2f ×)\n", d.Conns, d.EntriesPerSecond, d.AdmittedPerSecond, d.EntriesPerSecond/d.AdmittedPerSecond)
	fmt.Fprintf(w, "draw of %d entries for %d units: %.2f s to the winners' orders (target ≤ 30 s), losers marked in %.2f s more\n", d.Entries, d.Stock, d.DrawSeconds, d.LostSeconds)
	fmt.Fprintf(w, "reaper draw verify: %.2f s (target ≤ 10 s), peak RSS %d MB, exit %d\n", d.VerifySeconds, d.VerifyPeakRSS>>20, d.VerifyExit)
}
