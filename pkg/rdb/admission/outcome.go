package admission

// Outcome records: the decision on a claim whose caller was answered
// ErrOutcomeUnknown, kept beside its voucher so that any gateway can tell
// the buyer. The first decision recorded stands (every write is SET NX):
// the admission script's late reply (RecordOutcomes), or a gateway's
// decision from the buyer's orders and the claim's horizon
// (DecideOutcome). A claim answered in time has none: it costs Redis
// nothing.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/flashsale/flashsale/lua"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// NewSerial is a new claim's serial: 32 random bits, never zero. Only
// the claims of one buyer for one voucher in one millisecond must differ
// by it (their ids, their records, their orders): two such claims share
// one once in 2^32 pairs. Eight hex digits on the wire: each digit more
// was Redis's work on every admission.
func NewSerial() uint64 {
	for {
		if n := rand.Uint32(); n != 0 {
			return uint64(n)
		}
	}
}

// ClaimRef names one claim as its outcome is asked for: its voucher, its
// user, its time (unix ms, the order's created_ms if it was admitted),
// its serial (0 for a claim of a gateway before serials), its horizon
// (unix ms, by Redis's clock: after it the claim can take nothing) and
// its idempotency key ("" for none).
type ClaimRef struct {
	VoucherID int64
	UserID    string
	MS        int64
	Serial    uint64
	Horizon   int64
	Key       string
}

// RefOf is claim c's reference.
func RefOf(c Claim) ClaimRef {
	var horizon int64
	if !c.Horizon.IsZero() {
		horizon = c.Horizon.UnixMilli()
	}
	return ClaimRef{VoucherID: c.VoucherID, UserID: c.UserID, MS: c.Now.UnixMilli(), Serial: c.Serial, Horizon: horizon,
		Key: c.IdempotencyKey}
}

// outcomeKey is the record of claim ref: beside the voucher's hash (its
// bucket 0), so in its partition's slot. Claims of one buyer in one
// millisecond have records of their own, by their serials.
func (adm *Admitter) outcomeKey(ref ClaimRef) string {
	k := adm.bucketOf(ref.VoucherID, 0).Key() + ":claim:" + ref.UserID + ":" + strconv.FormatInt(ref.MS, 10)
	if ref.Serial != 0 {
		k += ":" + strconv.FormatUint(ref.Serial, 16)
	}
	if ref.Key != "" {
		k += ":" + ref.Key
	}
	return k
}

// Outcome is a claim's decision as recorded: admitted (its Admission), or
// refused (Refusal, the script's refusal; ErrNotSent when no call that
// could admit it ran).
type Outcome struct {
	Admitted  bool
	Admission Admission
	Refusal   error
}

// Admitted is the outcome of admission a; Refused that of a refusal.
func Admitted(a Admission) Outcome { return Outcome{Admitted: true, Admission: a} }

// Refused is the outcome of a claim refused err.
func Refused(err error) Outcome { return Outcome{Refusal: err} }

// record is outcome o as a record's value: "a ORDER FLAGS AMOUNT" or
// "r CODE" (0: not sent, or no call that could admit it ran).
func (o Outcome) record() string {
	if o.Admitted {
		a := o.Admission
		flags := 0
		if a.Replayed {
			flags |= 1
		}
		if a.Entry {
			flags |= 2
		}
		return "a " + strconv.FormatInt(a.OrderID, 10) + " " + strconv.Itoa(flags) + " " + strconv.FormatInt(a.Item.Amount, 10)
	}
	if code, ok := rdb.RefusalCode(o.Refusal); ok {
		return "r " + strconv.FormatInt(code, 10)
	}
	return "r 0"
}

// outcomeOf is late outcome o as an outcome; false when it is no decision
// (its round trip broke: the outcome is still unknown, and the buyer's
// orders and the claim's horizon will tell).
func outcomeOf(o LateOutcome) (Outcome, bool) {
	switch {
	case o.Err == nil:
		return Admitted(o.Admission), true
	case errors.Is(o.Err, ErrOutcomeUnknown), errors.Is(o.Err, rdb.ErrNotReplicated):
		return Outcome{}, false
	}
	if code, ok := rdb.RefusalCode(o.Err); ok {
		return Refused(rdb.Refusal(code)), true
	}
	if errors.Is(o.Err, ErrNotSent) {
		return Refused(ErrNotSent), true
	}
	return Outcome{}, false
}

// RecordOutcomes records the outcomes of late claims that are decisions,
// each kept for ttl, in one round trip. A claim decided already keeps its
// decision.
func (adm *Admitter) RecordOutcomes(ctx context.Context, late []LateOutcome, ttl time.Duration) error {
	pipe := adm.c.Pipeline()
	n := 0
	for _, o := range late {
		if out, ok := outcomeOf(o); ok {
			pipe.SetNX(ctx, adm.outcomeKey(RefOf(o.Claim)), out.record(), ttl)
			n++
		}
	}
	if n == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("record %d claim outcomes: %w", n, err)
	}
	return nil
}

// DecideOutcome records o as claim ref's outcome, kept for ttl, unless it
// has one already, and returns the outcome it has now: the first recorded
// stands, so every ask of one claim is answered alike.
func (adm *Admitter) DecideOutcome(ctx context.Context, ref ClaimRef, o Outcome, ttl time.Duration) (Outcome, error) {
	key := adm.outcomeKey(ref)
	pipe := adm.c.Pipeline()
	pipe.SetNX(ctx, key, o.record(), ttl)
	get := pipe.Get(ctx, key)
	if _, err := pipe.Exec(ctx); err != nil {
		return Outcome{}, fmt.Errorf("record claim outcome: %w", err)
	}
	return parseOutcome(get.Val())
}

// ClaimOutcome is claim ref's recorded outcome (false when none is) and
// the time by the clock of the Redis that holds it, read together
// (outcome.lua): an admission of the claim after this call is refused
// once that time is past the claim's horizon.
func (adm *Admitter) ClaimOutcome(ctx context.Context, ref ClaimRef) (Outcome, bool, time.Time, error) {
	res, err := lua.Outcome.Run(ctx, adm.c, []string{adm.outcomeKey(ref)}).Slice()
	if err != nil {
		return Outcome{}, false, time.Time{}, fmt.Errorf("claim outcome: %w", err)
	}
	if len(res) != 3 {
		return Outcome{}, false, time.Time{}, fmt.Errorf("claim outcome: reply %v", res)
	}
	sec, err1 := strconv.ParseInt(fmt.Sprint(res[1]), 10, 64)
	usec, err2 := strconv.ParseInt(fmt.Sprint(res[2]), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return Outcome{}, false, time.Time{}, fmt.Errorf("claim outcome: redis time %v: %w", res[1:], err)
	}
	now := time.Unix(sec, usec*1000)
	v, ok := res[0].(string)
	if !ok { // nil: no record
		return Outcome{}, false, now, nil
	}
	o, err := parseOutcome(v)
	return o, err == nil, now, err
}

// parseOutcome reads a record's value (Outcome.record).
func parseOutcome(v string) (Outcome, error) {
	f := strings.Fields(v)
	switch {
	case len(f) == 4 && f[0] == "a":
		id, err1 := strconv.ParseInt(f[1], 10, 64)
		flags, err2 := strconv.Atoi(f[2])
		amount, err3 := strconv.ParseInt(f[3], 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			break
		}
		return Admitted(Admission{OrderID: id, Replayed: flags&1 != 0, Entry: flags&2 != 0,
			Item: order.Item{Amount: amount}}), nil
	case len(f) == 2 && f[0] == "r":
		code, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			break
		}
		refusal := rdb.Refusal(code)
		if refusal == nil {
			refusal = ErrNotSent
		}
		return Refused(refusal), nil
	}
	return Outcome{}, fmt.Errorf("claim outcome: bad record %q", v)
}
