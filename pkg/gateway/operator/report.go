package operator

import (
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/room"
	"go.uber.org/zap"
)

// Refusals counts this replica's refused claims per voucher and reason
// (the error code), for the sale's report: no store holds them, so only
// the replica that answered knows. Only refusals of a voucher the
// admission script (or the sold-out pruner) decided are counted, so every
// key is a real voucher; an admitted claim never touches it.
type Refusals struct {
	Since time.Time
	m     sync.Map // refusalKey → *atomic.Int64
}

type refusalKey struct {
	voucher int64
	code    string
}

func (r *Refusals) Add(voucher int64, code string) {
	k := refusalKey{voucher, code}
	c, ok := r.m.Load(k)
	if !ok {
		c, _ = r.m.LoadOrStore(k, new(atomic.Int64))
	}
	c.(*atomic.Int64).Add(1)
}

// of returns voucher v's refusals by reason.
func (r *Refusals) of(v int64) map[string]int64 {
	out := map[string]int64{}
	r.m.Range(func(k, c any) bool {
		if key := k.(refusalKey); key.voucher == v {
			out[key.code] = c.(*atomic.Int64).Load()
		}
		return true
	})
	return out
}

// replicaRefusals is what one gateway replica knows of a sale's refused
// claims: its own answers since it started, never the others'.
type replicaRefusals struct {
	Replica  string           `json:"replica"`
	Since    time.Time        `json:"since"`
	ByReason map[string]int64 `json:"by_reason"`
}

type reportJSON struct {
	VoucherID string `json:"voucher_id"`
	Name      string `json:"name"`
	Kind      string `json:"kind"`
	db.Report
	// RefusedClaims: the answering replica's own count (see replicaRefusals).
	RefusedClaims replicaRefusals `json:"refused_claims"`
	// OutcomeUnknownClaims: the claims the answering replica answered
	// outcome_unknown ("answered") and what their late replies were
	// ("admitted", "refused"; "lost": none came, the buyer's orders tell).
	OutcomeUnknownClaims map[string]int64 `json:"outcome_unknown_claims"`
	// Queue: a voucher's waiting room's story, from Redis (absent without
	// a room, or while Redis cannot be read).
	Queue *room.Story `json:"queue,omitempty"`
}

// ReplicaName names this gateway replica: its host name (the pod's name
// on Kubernetes).
func ReplicaName() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}

// voucherReport: GET /admin/v1/vouchers/{id}/report, the account of one
// sale from MySQL, the refused claims this replica answered, and a
// waiting room's story from Redis.
func (a *API) voucherReport(w http.ResponseWriter, r *http.Request) {
	id, ok := a.adminAndID(w, r)
	if !ok {
		return
	}
	v, err := a.voucherOf(r, id)
	var rep db.Report
	if err == nil {
		rep, err = a.DB.Report(r.Context(), id)
	}
	if err != nil {
		a.Fail(w, r, err)
		return
	}
	out := reportJSON{VoucherID: httpapi.IDString(id), Name: v.Name, Kind: v.Kind, Report: rep,
		RefusedClaims:        replicaRefusals{Replica: a.Replica, Since: a.Refused.Since.UTC(), ByReason: a.Refused.of(id)},
		OutcomeUnknownClaims: map[string]int64{}}
	if a.Unknown != nil {
		out.OutcomeUnknownClaims = a.Unknown.of(id)
	}
	if store := a.Rooms.Store(); store != nil {
		var qerr error
		if out.Queue, qerr = store.Story(r.Context(), id, a.Now()); qerr != nil {
			a.Log.Warn("report: the room's story could not be read from Redis", zap.Int64("voucher_id", id), zap.Error(qerr))
		}
	}
	httpapi.WriteJSON(w, http.StatusOK, out)
}
