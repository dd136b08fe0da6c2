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

// Batcher coalesces concurrent admissions into pipelines (auto-pipelining):
// each of its pipeline workers takes every claim waiting at the moment it
// is free, up to maxBatch, and sends them in one round trip. It never waits
// to fill a batch, so the latency it adds is at most one round trip already
// in flight; under load, claims share round trips and Redis's per-command
// network cost, and the claims of one bucket share one call of admit.lua.
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
	timeout  time.Duration
	wg       sync.WaitGroup
	stop     chan struct{}
	once     sync.Once
}

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

// NewBatcher starts workers pipeline workers sending at most maxBatch
// claims per round trip, each round trip bounded by timeout.
func (s *Store) NewBatcher(workers, maxBatch int, timeout time.Duration) *Batcher {
	b := &Batcher{s: s, reqs: make(chan *admitReq, workers*maxBatch), maxBatch: maxBatch, timeout: timeout, stop: make(chan struct{})}
	for range workers {
		b.wg.Add(1)
		go b.loop()
	}
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

// Close stops the pipeline workers after the batches in flight.
func (b *Batcher) Close() {
	b.once.Do(func() { close(b.stop) })
	b.wg.Wait()
}

func (b *Batcher) loop() {
	defer b.wg.Done()
	batch := make([]*admitReq, 0, b.maxBatch)
	claims := make([]Claim, 0, b.maxBatch)
	for {
		batch, claims = batch[:0], claims[:0]
		select {
		case r := <-b.reqs:
			batch = append(batch, r)
		case <-b.stop:
			return
		}
	fill:
		for len(batch) < b.maxBatch {
			select {
			case r := <-b.reqs:
				batch = append(batch, r)
			default:
				break fill
			}
		}
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
		if len(live) == 0 {
			continue
		}
		groups := b.s.byMaster(claims)
		if groups == nil {
			b.admit(live, claims)
			continue
		}
		// Each master's claims go in a pipeline of their own: a cluster
		// pipeline returns when its slowest node does, so a master being
		// failed over would hold up every other master's claims. The
		// largest group is sent from here, the others beside it.
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
	out, errs, err := b.s.AdmitMany(ctx, claims)
	cancel()
	for i, r := range reqs {
		if err != nil {
			r.done <- admitResult{err: err}
		} else {
			r.done <- admitResult{a: out[i], err: errs[i]}
		}
	}
}
