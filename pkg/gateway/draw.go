package gateway

import (
	"errors"
	"net/http"
	"time"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/draw"
	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/voucher"
)

// drawJSON is a draw sale as anyone with a user token sees it.
type drawJSON struct {
	VoucherID string `json:"voucher_id"`
	// State: open (taking entries), drawing (entries closed, winners not
	// yet drawn), drawn.
	State string `json:"state"`
	// Entries persisted (an entry is counted once a worker wrote it).
	Entries int64 `json:"entries"`
	// Winners at the draw; WaitlistPassed: units the waitlist passed on to
	// the next entries since; Paid: orders of the draw that are paid.
	Winners        int64      `json:"winners"`
	WaitlistPassed int64      `json:"waitlist_passed"`
	Paid           int64      `json:"paid"`
	SeedCommitment string     `json:"seed_commitment"`
	Seed           string     `json:"seed,omitempty"` // once drawn
	EndsAt         *time.Time `json:"ends_at"`
	DrawnAt        *time.Time `json:"drawn_at,omitempty"`
}

var errNotADraw = httpapi.NewError(http.StatusNotFound, "not_a_draw", "this voucher is not a draw sale")

// drawState is the state of v's draw as the API names it at now.
func drawState(v db.Voucher, now time.Time) string {
	switch {
	case v.DrawState == draw.StateDrawn:
		return draw.StateDrawn
	case v.DrawState == draw.StateDrawing, v.EndsAt != nil && !now.Before(*v.EndsAt):
		return draw.StateDrawing
	}
	return draw.StateOpen
}

// getDraw: GET /v1/vouchers/{id}/draw, for any user.
func (g *Gateway) getDraw(w http.ResponseWriter, r *http.Request) {
	_, id, ok := g.userAndID(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	v, err := g.dbOf(r).Voucher(ctx, id)
	switch {
	case errors.Is(err, db.ErrNotFound):
		err = httpapi.ErrVoucherMissing
	case err == nil && !v.IsDraw():
		err = errNotADraw
	}
	if err != nil {
		g.fail(w, r, err)
		return
	}
	d, err := g.drawOf(r, v)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, d)
}

// drawOf is draw voucher v's draw as the API shows it.
func (g *Gateway) drawOf(r *http.Request, v db.Voucher) (*drawJSON, error) {
	f, err := g.drawFigures.Get(r.Context(), v.ID, g.now())
	if err != nil {
		return nil, err
	}
	return &drawJSON{VoucherID: httpapi.IDString(v.ID), State: drawState(v, g.now()), Entries: f.Entries,
		Winners: v.DrawWinners, WaitlistPassed: f.Passed, Paid: f.Paid,
		SeedCommitment: v.SeedCommitment, Seed: voucher.Revealed(v), EndsAt: v.EndsAt, DrawnAt: v.DrawnAt}, nil
}
