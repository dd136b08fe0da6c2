package rdb

// Outcome records: what the admission script decided for a claim whose
// caller was answered ErrOutcomeUnknown (its reply came after the claim's
// time), written when the reply arrives, so that any gateway can tell the
// buyer. A claim answered in time has none: it costs Redis nothing.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/pkg/order"
)

// ClaimRef names one claim as its outcome is asked for: its voucher, its
// user, its time (unix ms, the order's created_ms if it was admitted) and
// its idempotency key ("" for none).
type ClaimRef struct {
	VoucherID int64
	UserID    string
	MS        int64
	Key       string
}

// RefOf is claim c's reference.
func RefOf(c Claim) ClaimRef {
	return ClaimRef{VoucherID: c.VoucherID, UserID: c.UserID, MS: c.Now.UnixMilli(), Key: c.IdempotencyKey}
}

// outcomeKey is the record of claim ref: beside the voucher's hash (its
// bucket 0), so in its partition's slot.
func (s *Store) outcomeKey(ref ClaimRef) string {
	k := s.bucketOf(ref.VoucherID, 0).key() + ":claim:" + ref.UserID + ":" + strconv.FormatInt(ref.MS, 10)
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

// outcomeOf is late outcome o as recorded; false when it is no decision
// (its round trip broke: the outcome is still unknown, and the buyer's
// orders will tell).
func outcomeOf(o LateOutcome) (string, bool) {
	if o.Err == nil {
		a := o.Admission
		flags := 0
		if a.Replayed {
			flags |= 1
		}
		if a.Entry {
			flags |= 2
		}
		return "a " + strconv.FormatInt(a.OrderID, 10) + " " + strconv.Itoa(flags) + " " + strconv.FormatInt(a.Item.Amount, 10), true
	}
	for code, e := range admitErrors {
		if errors.Is(o.Err, e) {
			return "r " + strconv.FormatInt(code, 10), true
		}
	}
	if errors.Is(o.Err, ErrNotSent) {
		return "r 0", true
	}
	return "", false
}

// RecordOutcomes writes the outcomes of late claims that are decisions,
// each kept for ttl, in one round trip.
func (s *Store) RecordOutcomes(ctx context.Context, late []LateOutcome, ttl time.Duration) error {
	pipe := s.c.Pipeline()
	n := 0
	for _, o := range late {
		if v, ok := outcomeOf(o); ok {
			pipe.Set(ctx, s.outcomeKey(RefOf(o.Claim)), v, ttl)
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

// ClaimOutcome is claim ref's recorded outcome; false when none is.
func (s *Store) ClaimOutcome(ctx context.Context, ref ClaimRef) (Outcome, bool, error) {
	v, err := s.c.Get(ctx, s.outcomeKey(ref)).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return Outcome{}, false, nil
	case err != nil:
		return Outcome{}, false, fmt.Errorf("claim outcome: %w", err)
	}
	f := strings.Fields(v)
	switch {
	case len(f) == 4 && f[0] == "a":
		id, err1 := strconv.ParseInt(f[1], 10, 64)
		flags, err2 := strconv.Atoi(f[2])
		amount, err3 := strconv.ParseInt(f[3], 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			break
		}
		return Outcome{Admitted: true, Admission: Admission{OrderID: id, Replayed: flags&1 != 0, Entry: flags&2 != 0,
			Item: order.Item{Amount: amount}}}, true, nil
	case len(f) == 2 && f[0] == "r":
		code, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			break
		}
		refusal, known := admitErrors[code]
		if !known {
			refusal = ErrNotSent
		}
		return Outcome{Refusal: refusal}, true, nil
	}
	return Outcome{}, false, fmt.Errorf("claim outcome: bad record %q", v)
}
