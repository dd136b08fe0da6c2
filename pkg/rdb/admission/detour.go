package admission

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/flashsale/flashsale/pkg/rdb"
)

// A detour is a claim decided again off the path that carried it: its
// admission answered that its bucket of a hot voucher was dry, or that its
// user's records were moving in a split. The claim is then admitted from
// the other buckets' units (a refill), answered sold_out for good, or tried
// again once the split has moved its user; all of it off the Batcher's
// pipelines (Batcher.detour), so that no other claim waits for it. Its
// first call was refused, so until a new call is sent nothing was
// admitted for it.

// detoured reports whether claim c, answered err by its admission, takes
// a detour: its bucket of a hot voucher was dry, or its user's records
// were moving in a split.
func (adm *Admitter) detoured(c Claim, err error) bool {
	return errors.Is(err, rdb.ErrSplitting) || errors.Is(err, rdb.ErrSoldOut) && adm.s.KnownBuckets(c.VoucherID) > 1
}

// detourAll decides again, in out and errs, each of claims that took a
// detour (AdmitMany's, on the caller's goroutine).
func (adm *Admitter) detourAll(ctx context.Context, claims []Claim, out []Admission, errs []error) {
	found := time.Now() // the claims' admissions were refused by now
	for i, c := range claims {
		if adm.detoured(c, errs[i]) {
			out[i], errs[i] = adm.detour(ctx, c, errs[i], found)
		}
	}
}

// splitWait bounds the wait between tries of a claim whose user's records
// are moving in a split (it doubles from a millisecond): a split moves a
// bucket's records in a few round trips a thousand users.
const splitWait = 20 * time.Millisecond

// detour decides claim c again, its admission having answered err at
// found: while its user's records are moving in a split it tries again,
// waiting a little longer each time, until they have moved or ctx ends;
// once its bucket is dry it is admitted after a refill (refillAndAdmit).
func (adm *Admitter) detour(ctx context.Context, c Claim, err error, found time.Time) (Admission, error) {
	for wait := time.Millisecond; errors.Is(err, rdb.ErrSplitting); wait = min(2*wait, splitWait) {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return Admission{}, ctx.Err()
		case <-t.C:
		}
		out, errs, berr := adm.admitBatch(ctx, []Claim{c})
		if berr != nil {
			return Admission{}, berr
		}
		if !adm.detoured(c, errs[0]) {
			return out[0], errs[0]
		}
		err, found = errs[0], time.Now()
	}
	return adm.refillAndAdmit(ctx, c, found)
}

// dryVoucher is a hot voucher's refills in this process: one at a time
// (lock), so a sold-out tail's claims make one voucher's moves, not one
// each; and when the last read that found it sold out began, for how
// many units, so that the claims waiting meanwhile are answered from
// that read.
type dryVoucher struct {
	lock      chan struct{} // held by the claim refilling
	waiting   atomic.Int64  // claims waiting for the lock
	soldOutAt time.Time     // when the read that found it sold out began (zero: none)
	soldOut   int64         // the units that read found it sold out for
	// refilled: by bucket, when the last refill that brought it units
	// ended; a claim that found that bucket dry before then runs again
	// without a refill of its own.
	refilled map[int]time.Time
}

func (adm *Admitter) dryOf(v int64) *dryVoucher {
	if d, ok := adm.dry.Load(v); ok {
		return d.(*dryVoucher)
	}
	d, _ := adm.dry.LoadOrStore(v, &dryVoucher{lock: make(chan struct{}, 1)})
	return d.(*dryVoucher)
}

// DryAttempts bounds how many times a claim refills its dry bucket and
// runs again, within its deadline, before it is answered ErrOverloaded
// (other claims kept taking the units it brought). At the end of a hot
// sale, with a few units spread over the buckets and dozens of claims on
// each, four attempts were lost in a row on a busy machine: a 503 while
// units were left.
const DryAttempts = 16

// refillAndAdmit admits claim c of a hot voucher, whose bucket was found
// dry by found, after bringing units from the other buckets; ErrSoldOut
// when the voucher as a whole has fewer units than c asks. The voucher's
// claims refill one at a time in this process; a claim that waited while
// a read begun after found saw the voucher sold out for its units is
// answered so without a read of its own (the voucher was sold out then,
// within its request), and one that waited while a refill of its bucket
// ended runs again on the units it brought (dryVoucher.refillOnce).
func (adm *Admitter) refillAndAdmit(ctx context.Context, c Claim, found time.Time) (Admission, error) {
	n := adm.s.KnownBuckets(c.VoucherID)
	home, need := rdb.UserBucket(c.UserID, n), max(c.Quantity, 1)
	d := adm.dryOf(c.VoucherID)
	// Each try refills (at most DryAttempts), or runs again after another
	// claim's refill of the same bucket (at most as often again).
	for tries, own := 0, 0; own < DryAttempts && tries < 2*DryAttempts; tries++ {
		refilled, mine, err := d.refillOnce(ctx, found, need, home, func() (time.Time, bool, error) {
			if adm.signals.refill != nil {
				adm.signals.refill()
			}
			read := time.Now()
			ok, err := adm.s.Refill(ctx, c.VoucherID, n, home, need)
			return read, ok, err
		})
		if err != nil {
			return Admission{}, err
		}
		if !refilled {
			return Admission{}, rdb.ErrSoldOut
		}
		if mine {
			own++
		}
		out, errs, err := adm.admitBatch(ctx, []Claim{c})
		if err != nil {
			return Admission{}, err
		}
		if !errors.Is(errs[0], rdb.ErrSoldOut) {
			return out[0], errs[0]
		}
		found = time.Now()
	}
	return Admission{}, rdb.ErrOverloaded
}

// refillOnce brings units to bucket home, which a claim for need units
// found dry by found, by f (false: the voucher is sold out, by its read
// begun at read), with the voucher's lock held (mine); or, when a refill
// of home ended after found or a read begun after found saw the voucher
// sold out for need, answers from it without a refill of its own. The
// lock is held for the refill only: the claims that waited on it run
// again at once, not one after another.
func (d *dryVoucher) refillOnce(ctx context.Context, found time.Time, need int64, home int, f func() (read time.Time, ok bool, err error)) (refilled, mine bool, err error) {
	d.waiting.Add(1)
	select {
	case d.lock <- struct{}{}:
		d.waiting.Add(-1)
		defer func() { <-d.lock }()
	case <-ctx.Done():
		d.waiting.Add(-1)
		return false, false, ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return false, false, err
	}
	switch {
	case !d.soldOutAt.IsZero() && !d.soldOutAt.Before(found) && need >= d.soldOut:
		return false, false, nil
	case d.refilled[home].After(found):
		return true, false, nil
	}
	read, ok, err := f()
	switch {
	case err != nil:
		return false, true, err
	case !ok:
		d.soldOutAt, d.soldOut = read, need // the newest read: it answers the most claims waiting
		return false, true, nil
	}
	if d.refilled == nil {
		d.refilled = map[int]time.Time{}
	}
	d.refilled[home] = time.Now()
	return true, true, nil
}

// detour decides again, off the pipeline's worker, claim c (of r), which
// took a detour (its admission answered err at found): its refill (moves
// between buckets, a few round trips; one voucher's one at a time) or its
// wait holds up no other claim, of this voucher or another. Its waits end
// at its deadline to be sent.
func (b *Batcher) detour(r *admitReq, c Claim, err error, found time.Time) {
	defer b.wg.Done()
	deadline := time.Now().Add(b.cfg.Timeout)
	if r.deadline.Before(deadline) {
		deadline = r.deadline
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	a, err := b.adm.detour(ctx, c, err, found)
	err = b.uncut(err)
	if !b.answer(r, admitResult{a: a, err: err}) && b.cfg.Late != nil {
		b.cfg.Late([]LateOutcome{{Claim: c, Admission: a, Err: err}})
	}
}
