package reaper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/draw"
)

// DrawCheck is a draw recomputed from its revealed seed and the entries in
// MySQL, against what MySQL recorded (reaper draw verify).
type DrawCheck struct {
	VoucherID      string `json:"voucher_id"`
	SeedCommitment string `json:"seed_commitment"`
	Seed           string `json:"seed"`
	// CommitmentMatches: SHA-256 of the seed is the commitment published
	// at creation.
	CommitmentMatches bool  `json:"commitment_matches"`
	Entries           int64 `json:"entries"`
	// Winners: entries MySQL records as won at the draw; WinnersMatch:
	// they are the first Winners entries in the draw order.
	Winners      int64 `json:"winners"`
	WinnersMatch bool  `json:"winners_match"`
	// WaitlistPassed: entries given a unit by the waitlist; WaitlistMatches:
	// they are the next ones in the draw order.
	WaitlistPassed  int64 `json:"waitlist_passed"`
	WaitlistMatches bool  `json:"waitlist_matches"`
	// Ranked: entries MySQL ranked (the winners and the waitlist's head);
	// RanksMatch: their ranks are the draw order's first places.
	Ranked     int64    `json:"ranked"`
	RanksMatch bool     `json:"ranks_match"`
	Problems   []string `json:"problems"`
	OK         bool     `json:"ok"`
}

// ErrNotDrawn says that the voucher is not a draw sale, or not drawn yet.
var ErrNotDrawn = errors.New("not a drawn draw sale")

// VerifyDraw recomputes draw voucher v's draw by the procedure of pkg/draw
// from its revealed seed and its entry ids in MySQL, streaming the entries
// (memory bounded by the winners), and compares it with what MySQL
// recorded. each, when set, is called with every entry id, in id order.
func VerifyDraw(ctx context.Context, d *db.Store, v int64, each func(id int64)) (DrawCheck, error) {
	c := DrawCheck{VoucherID: strconv.FormatInt(v, 10), Problems: []string{}}
	vr, err := d.Voucher(ctx, v)
	if err != nil {
		return c, err
	}
	if !vr.IsDraw() || vr.DrawState != draw.StateDrawn {
		return c, fmt.Errorf("voucher %d: %w (allocation %s, state %q)", v, ErrNotDrawn, vr.Allocation, vr.DrawState)
	}
	c.SeedCommitment, c.Seed = vr.SeedCommitment, vr.DrawSeed
	seed, err := draw.ParseSeed(vr.DrawSeed)
	if err != nil {
		return c, err
	}
	c.CommitmentMatches = seed.Commitment() == vr.SeedCommitment
	rec, err := d.DrawRecordOf(ctx, v)
	if err != nil {
		return c, err
	}
	c.Winners, c.WaitlistPassed = int64(len(rec.Won)), int64(len(rec.Passed))
	c.Ranked = int64(len(rec.Ranked))
	first := draw.NewFirst(seed, max(len(rec.Won)+len(rec.Passed), len(rec.Ranked)))
	err = d.EachEntry(ctx, v, func(id int64) {
		first.Add(id)
		if each != nil {
			each(id)
		}
	})
	if err != nil {
		return c, err
	}
	c.Entries = first.Seen()
	ranked := first.Sorted()
	ids := make([]int64, len(ranked))
	for i, r := range ranked {
		ids[i] = r.ID
	}
	w := min(len(rec.Won), len(ids))
	c.WinnersMatch = sameSet(ids[:w], rec.Won)
	c.WaitlistMatches = sameSet(ids[w:min(w+len(rec.Passed), len(ids))], rec.Passed)
	c.RanksMatch = slices.Equal(ids[:min(len(rec.Ranked), len(ids))], rec.Ranked)
	if !c.CommitmentMatches {
		c.Problems = append(c.Problems, "SHA-256 of the seed is not the seed commitment")
	}
	if vr.DrawWinners != c.Winners {
		c.Problems = append(c.Problems, fmt.Sprintf("the voucher records %d winners, the orders %d", vr.DrawWinners, c.Winners))
	}
	if c.Winners > min(c.Entries, vr.StockTotal) {
		c.Problems = append(c.Problems, fmt.Sprintf("%d winners of %d entries for %d units", c.Winners, c.Entries, vr.StockTotal))
	}
	if !c.WinnersMatch {
		c.Problems = append(c.Problems, "the recorded winners are not the first entries in the draw order")
	}
	if !c.RanksMatch {
		c.Problems = append(c.Problems, "the ranks MySQL holds are not the draw order")
	}
	if !c.WaitlistMatches {
		c.Problems = append(c.Problems, "the entries given a unit by the waitlist are not the next ones in the draw order")
	}
	c.OK = len(c.Problems) == 0
	return c, nil
}

func sameSet(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

// PrintDrawCheck writes c for a reader.
func PrintDrawCheck(w io.Writer, c DrawCheck) {
	yes := map[bool]string{true: "yes", false: "NO"}
	fmt.Fprintf(w, "voucher %s\n", c.VoucherID)
	fmt.Fprintf(w, "seed commitment  %s\nseed             %s\ncommitment holds %s\n", c.SeedCommitment, c.Seed, yes[c.CommitmentMatches])
	fmt.Fprintf(w, "entries          %d\nwinners          %d (recomputed: %s)\nwaitlist passed  %d (recomputed: %s)\nranked           %d (recomputed: %s)\n",
		c.Entries, c.Winners, yes[c.WinnersMatch], c.WaitlistPassed, yes[c.WaitlistMatches], c.Ranked, yes[c.RanksMatch])
	for _, p := range c.Problems {
		fmt.Fprintf(w, "problem: %s\n", p)
	}
	if c.OK {
		fmt.Fprintln(w, "verified: the winners are those the seed and the entries give")
	} else {
		fmt.Fprintln(w, "NOT verified")
	}
}
