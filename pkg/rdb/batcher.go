package rdb

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"
)

// ErrBatcherClosed is returned by a Batcher that was closed.
var ErrBatcherClosed = errors.New("admission batcher closed")

// Batcher coalesces concurrent admissions into pipelines (auto-pipelining),
// and the claims of one bucket in a pipeline into one call of admit.lua.
// A claim is sent at once when no pipeline is in flight; while one is, the
// claims arriving wait for it to return and go together in the next, unless
// a full call's worth (fillClaims) is waiting, which goes at once beside it,
// up to its workers pipelines in flight. So at a light load every claim
// goes alone, and under load the calls carry as many claims as arrive
// in one round trip: Redis pays a call's cost (the script's set-up, its
// reads and writes of the voucher, the stream entry, the network's reads
// and writes) once for all of them. What a claim waits for is at most the
// round trip in flight.
//
// Each claim has a deadline: its context's, or the batcher's timeout from
// its Admit call when the context has none (the gateway's case). A claim
// still waiting at its deadline is not sent, and a round trip ends at the
// earliest deadline of its claims, or the timeout from when it is sent.
// The deadline is a time carried with the claim, not a context with a
// timer per claim: a timer started and stopped per claim was 4 % of the
// gateway's CPU.
type Batcher struct {
	s        *Store
	reqs     chan *admitReq
	maxBatch int
	workers  int
	timeout  time.Duration
	sends    chan []*admitReq // batches, from the dispatcher to the workers
	returned chan []*admitReq // a worker's batch, answered: its slice to reuse
	wg       sync.WaitGroup
	stop     chan struct{}
	once     sync.Once
}

// fillClaims is a full call's worth of waiting claims: that many go in a
// pipeline of their own beside the one in flight. It is a stream entry's
// orders (order.MaxPerEntry), from which on the script's cost per
// admission hardly falls.
const fillClaims = 32

type admitReq struct {
	ctx      context.Context
	deadline time.Time
	claim    Claim
	done     chan admitResult
}

type admitResult struct {
	a   Admission
	err error
}

// NewBatcher starts a batcher of at most workers pipelines in flight, each
// of at most maxBatch claims and bounded by timeout.
func (s *Store) NewBatcher(workers, maxBatch int, timeout time.Duration) *Batcher {
	b := &Batcher{s: s, reqs: make(chan *admitReq, workers*maxBatch), maxBatch: maxBatch, workers: workers, timeout: timeout,
		sends: make(chan []*admitReq), returned: make(chan []*admitReq, workers), stop: make(chan struct{})}
	for range workers {
		b.wg.Add(1)
		go b.work()
	}
	b.wg.Add(1)
	go b.dispatch()
	return b
}

// reqPool recycles requests whose answer was received; a request whose
// caller gave up is never reused, as its answer may still arrive.
var reqPool = sync.Pool{New: func() any { return &admitReq{done: make(chan admitResult, 1)} }}

// Admit is Store.Admit through the batcher, answered by ctx's deadline,
// or within the batcher's timeout when ctx has none
// (context.DeadlineExceeded when it ran out before the claim was sent).
// If ctx ends or the deadline passes after the claim was sent, it may
// still have been admitted (as with any timeout).
func (b *Batcher) Admit(ctx context.Context, c Claim) (Admission, error) {
	r := reqPool.Get().(*admitReq)
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(b.timeout)
	}
	r.ctx, r.claim, r.deadline = ctx, c, deadline
	select {
	case b.reqs <- r:
	case <-ctx.Done():
		reqPool.Put(r)
		return Admission{}, ctx.Err()
	case <-b.stop:
		reqPool.Put(r)
		return Admission{}, ErrBatcherClosed
	}
	select {
	case res := <-r.done:
		r.ctx = nil
		reqPool.Put(r)
		return res.a, res.err
	case <-ctx.Done():
		return Admission{}, ctx.Err()
	}
}

// Close stops the batcher after the pipelines in flight; the claims it
// held or that wait in its queue, never sent, are answered
// ErrBatcherClosed.
func (b *Batcher) Close() {
	b.once.Do(func() { close(b.stop) })
	b.wg.Wait()
}

// dispatch gathers the waiting claims into batches and hands each to a
// free worker: at once when none is in flight or fillClaims wait, else
// when a pipeline returns.
func (b *Batcher) dispatch() {
	defer b.wg.Done()
	defer close(b.sends)
	free := make([][]*admitReq, 0, b.workers+1) // one a pipeline in flight, one gathering
	for range b.workers + 1 {
		free = append(free, make([]*admitReq, 0, b.maxBatch))
	}
	inFlight := 0
	batch := free[len(free)-1]
	free = free[:len(free)-1]
	for {
		reqs := b.reqs
		if len(batch) == b.maxBatch {
			reqs = nil // full: it waits for a pipeline to return
		}
		if len(batch) > 0 && inFlight < b.workers && (inFlight == 0 || len(batch) >= fillClaims) {
			b.sends <- batch
			inFlight++
			batch = free[len(free)-1]
			free = free[:len(free)-1]
			continue
		}
		select {
		case r := <-reqs:
			batch = append(batch, r)
			// Take what else is waiting without blocking.
			for len(batch) < b.maxBatch {
				select {
				case r := <-b.reqs:
					batch = append(batch, r)
					continue
				default:
				}
				break
			}
		case done := <-b.returned:
			inFlight--
			free = append(free, done[:0])
		case <-b.stop:
			for _, r := range batch {
				r.done <- admitResult{err: ErrBatcherClosed}
			}
			for {
				select {
				case r := <-b.reqs:
					r.done <- admitResult{err: ErrBatcherClosed}
				default:
					return
				}
			}
		}
	}
}

// work sends the batches it is handed, one at a time, each in one round
// trip per Redis master.
func (b *Batcher) work() {
	defer b.wg.Done()
	claims := make([]Claim, 0, b.maxBatch)
	for batch := range b.sends {
		claims = claims[:0]
		// Claims whose caller gave up, or whose deadline passed, before
		// sending are not sent: they were never admitted.
		live := batch[:0]
		now := time.Now()
		for _, r := range batch {
			if err := r.ctx.Err(); err != nil || !now.Before(r.deadline) {
				r.done <- admitResult{err: cmp.Or(err, context.DeadlineExceeded)}
				continue
			}
			live = append(live, r)
			claims = append(claims, r.claim)
		}
		b.send(live, claims)
		clear(batch)
		b.returned <- batch
	}
}

// send sends claims (of live) in one round trip per master, the largest
// group from here and the others beside it, and answers each; it returns
// when the largest group is answered.
func (b *Batcher) send(live []*admitReq, claims []Claim) {
	if len(live) == 0 {
		return
	}
	groups := b.s.byMaster(claims)
	if groups == nil {
		b.admit(live, claims)
		return
	}
	// Each master's claims go in a pipeline of their own: a cluster
	// pipeline returns when its slowest node does, so a master being
	// failed over would hold up every other master's claims. The worker
	// is free again when the largest group returns.
	for k := len(groups) - 1; k >= 0; k-- {
		rs, cs := make([]*admitReq, len(groups[k])), make([]Claim, len(groups[k]))
		for j, i := range groups[k] {
			rs[j], cs[j] = live[i], claims[i]
		}
		if k == 0 {
			b.admit(rs, cs)
			break
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.admit(rs, cs)
		}()
	}
}

// admit sends claims (of reqs) in one round trip, which ends at the
// earliest of their deadlines or the timeout, and answers each.
func (b *Batcher) admit(reqs []*admitReq, claims []Claim) {
	deadline := time.Now().Add(b.timeout)
	for _, r := range reqs {
		if r.deadline.Before(deadline) {
			deadline = r.deadline
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	out, errs, err := b.s.admitBatch(ctx, claims)
	cancel()
	var dry []int
	for i, r := range reqs {
		switch {
		case err != nil:
			r.done <- admitResult{err: err}
		case b.s.later(claims[i], errs[i]):
			dry = append(dry, i)
		default:
			r.done <- admitResult{a: out[i], err: errs[i]}
		}
	}
	if len(dry) > 0 {
		found := time.Now() // their buckets were found dry by now
		for _, i := range dry {
			b.wg.Add(1)
			go b.admitDry(reqs[i], claims[i], errs[i], found)
		}
	}
}

// admitDry decides again, off the pipeline's worker, claim c (of r),
// which found its bucket of a hot voucher dry by found, or its user's
// records moving in a split (err): its refill (moves between buckets, a
// few round trips; one voucher's one at a time) or its wait holds up no
// other claim, of this voucher or another.
func (b *Batcher) admitDry(r *admitReq, c Claim, err error, found time.Time) {
	defer b.wg.Done()
	deadline := time.Now().Add(b.timeout)
	if r.deadline.Before(deadline) {
		deadline = r.deadline
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	a, err := b.s.admitLater(ctx, c, err, found)
	r.done <- admitResult{a: a, err: err}
}
