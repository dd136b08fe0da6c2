package admission

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/pkg/rdb"
)

// ErrBatcherClosed is returned by a Batcher that was closed.
var ErrBatcherClosed = errors.New("admission batcher closed")

// ErrNotSent says that the claim was never sent to Redis (its deadline passed while
// it waited, or no connection could be had): the admission script did not
// run for it, and never will.
var ErrNotSent = errors.New("claim not sent to redis")

// ErrOutcomeUnknown says that the claim was sent to Redis and no reply was read in
// time. The admission script may have run, or may still run: only its
// reply, or what it wrote (the buyer's orders), can tell.
var ErrOutcomeUnknown = errors.New("claim sent, outcome unknown")

// Batcher coalesces concurrent admissions into pipelines (auto-pipelining),
// and the claims of one bucket in a pipeline into one call of admit.lua.
// A claim is sent at once when no pipeline is in flight; while one is, the
// claims arriving wait for it to return and go together in the next, unless
// a full call's worth (fillClaims) is waiting, which goes at once beside it,
// up to its workers pipelines in flight. So at a light load every claim
// goes alone, and under load the calls carry as many claims as arrive
// in one round trip: Redis pays a call's cost (the script's set-up, its
// reads and writes of the voucher, the stream entry, the network's reads
// and writes) once for all of them.
//
// A claim's answer says what Redis did (BatcherConfig):
//   - a claim still waiting at its deadline (its context's, or Timeout
//     from its Admit call) is never sent: ErrNotSent;
//   - a claim sent is answered by its reply: the script's decision. Its
//     caller waits for it until ReplyTimeout from its Admit call; past
//     that, the caller is answered ErrOutcomeUnknown, and the round trip
//     goes on until its reply or its connection's read timeout (the
//     admission client's, New's ac): the outcome then
//     arrives late, and is handed to Late;
//   - a round trip that breaks after sending (a read timeout, a reset
//     connection) answers its claims ErrOutcomeUnknown: the script may
//     have run.
//
// Deadlines are times carried with the claims, watched by one timer in
// the dispatcher (the claims waiting) and one a round trip (the replies
// due), not a timer a claim: a timer started and stopped per claim was
// 4 % of the gateway's CPU.
type Batcher struct {
	adm      *Admitter
	cfg      BatcherConfig
	reqs     chan *admitReq
	sends    chan []*admitReq // batches, from the dispatcher to the workers
	returned chan []*admitReq // a worker's batch, answered: its slice to reuse
	wg       sync.WaitGroup
	stop     chan struct{}
	once     sync.Once
	// cut is set when CloseBy closed the admission connections under the
	// round trips in flight: a round trip failing after it may have been
	// sent, whatever its error says (a closed client reads as "not sent").
	cut atomic.Bool
}

// BatcherConfig is a Batcher's size and bounds.
type BatcherConfig struct {
	// Workers is the most pipelines in flight at once.
	Workers int
	// MaxBatch bounds the claims of one pipeline.
	MaxBatch int
	// Timeout bounds a claim's wait to be sent (when its context has no
	// deadline).
	Timeout time.Duration
	// ReplyTimeout bounds a sent claim's wait for its reply, from its Admit
	// call (when its context has no deadline); at least Timeout, which it
	// is when zero.
	ReplyTimeout time.Duration
	// Late, if set, is handed the outcomes of claims answered
	// ErrOutcomeUnknown whose replies arrived after all (or whose round
	// trip then failed: the outcome stays unknown), once a round trip. It
	// runs on the batcher's worker: it must not block.
	Late func([]LateOutcome)
}

// LateOutcome is the outcome of a claim whose caller was answered
// ErrOutcomeUnknown: the admission, or the script's refusal (Err is
// ErrOutcomeUnknown when no reply came at all).
type LateOutcome struct {
	Claim     Claim
	Admission Admission
	Err       error
}

// fillClaims is a full call's worth of waiting claims: that many go in a
// pipeline of their own beside the one in flight. It is a stream entry's
// orders (order.MaxPerEntry), from which on the script's cost per
// admission hardly falls.
const fillClaims = 32

// A request's states. Whoever moves it out of reqWaiting or reqSent (by
// compare-and-swap) answers it, or hands its outcome to Late: exactly one
// answer a request.
const (
	reqWaiting  int32 = iota // in the batcher, not sent
	reqSent                  // in a round trip
	reqDropped               // never sent: answered ErrNotSent (or its caller gave up)
	reqLate                  // sent; answered ErrOutcomeUnknown: its outcome goes to Late
	reqAnswered              // answered by its reply
)

type admitReq struct {
	ctx      context.Context
	deadline time.Time // to be sent by
	replyBy  time.Time // to be answered by, once sent
	claim    Claim
	state    atomic.Int32
	done     chan admitResult
}

type admitResult struct {
	a   Admission
	err error
}

// NewBatcher starts a batcher of at most workers pipelines in flight, each
// of at most maxBatch claims, a claim sent within timeout and answered
// within it too.
func (adm *Admitter) NewBatcher(workers, maxBatch int, timeout time.Duration) *Batcher {
	return adm.StartBatcher(BatcherConfig{Workers: workers, MaxBatch: maxBatch, Timeout: timeout})
}

// StartBatcher starts a batcher configured by cfg.
func (adm *Admitter) StartBatcher(cfg BatcherConfig) *Batcher {
	cfg.ReplyTimeout = max(cfg.ReplyTimeout, cfg.Timeout)
	b := &Batcher{adm: adm, cfg: cfg, reqs: make(chan *admitReq, cfg.Workers*cfg.MaxBatch),
		sends: make(chan []*admitReq), returned: make(chan []*admitReq, cfg.Workers), stop: make(chan struct{})}
	for range cfg.Workers {
		b.wg.Add(1)
		go b.work()
	}
	b.wg.Add(1)
	go b.dispatch()
	return b
}

// reqPool recycles requests answered by their replies; a request whose
// caller gave up, or that was answered ErrOutcomeUnknown, is never reused,
// as a worker may still hold it.
var reqPool = sync.Pool{New: func() any { return &admitReq{done: make(chan admitResult, 1)} }}

// Admit is Admitter.Admit through the batcher: ErrNotSent (wrapping
// context.DeadlineExceeded) when the claim was not sent by its deadline
// (ctx's, or the batcher's Timeout when ctx has none), the script's
// decision when its reply came in time, and ErrOutcomeUnknown when it was
// sent and its reply did not come by ctx's deadline, or ReplyTimeout.
func (b *Batcher) Admit(ctx context.Context, c Claim) (Admission, error) {
	r := reqPool.Get().(*admitReq)
	now := time.Now()
	deadline, ok := ctx.Deadline()
	r.replyBy = deadline
	if !ok {
		deadline, r.replyBy = now.Add(b.cfg.Timeout), now.Add(b.cfg.ReplyTimeout)
	}
	r.ctx, r.claim, r.deadline = ctx, c, deadline
	r.state.Store(reqWaiting)
	select {
	case b.reqs <- r:
	case <-ctx.Done():
		reqPool.Put(r)
		return Admission{}, fmt.Errorf("%w: %w", ErrNotSent, ctx.Err())
	case <-b.stop:
		reqPool.Put(r)
		return Admission{}, ErrBatcherClosed
	}
	select {
	case res := <-r.done:
		if r.state.Load() == reqAnswered {
			r.ctx = nil
			reqPool.Put(r)
		}
		return res.a, res.err
	case <-ctx.Done():
		switch {
		case r.state.CompareAndSwap(reqWaiting, reqDropped):
			return Admission{}, fmt.Errorf("%w: %w", ErrNotSent, ctx.Err())
		case r.state.CompareAndSwap(reqSent, reqLate):
			return Admission{}, fmt.Errorf("%w: %w", ErrOutcomeUnknown, ctx.Err())
		}
		res := <-r.done // answered meanwhile: it is there
		return res.a, res.err
	}
}

// Close stops the batcher after the pipelines in flight; the claims it
// held or that wait in its queue, never sent, are answered
// ErrBatcherClosed.
func (b *Batcher) Close() { b.CloseBy(time.Time{}) }

// CloseBy is Close that waits for the pipelines in flight until deadline
// (zero: for as long as they last). Past it, the Admitter's admission
// connections (New's ac) are closed, which ends their round trips at
// once: their claims' outcomes go to Late unknown, and stay decidable by
// the buyers' orders and the claims' horizons. Without admission
// connections of their own, round trips end at the store's read timeout.
func (b *Batcher) CloseBy(deadline time.Time) {
	b.once.Do(func() { close(b.stop) })
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		select {
		case <-done:
			return
		case <-t.C:
			b.cut.Store(true)
			b.adm.cutAdmissions()
		}
	}
	<-done
}

// drop answers r, never sent, err; false when its caller had dropped it
// already (it is answered).
func drop(r *admitReq, err error) bool {
	if !r.state.CompareAndSwap(reqWaiting, reqDropped) {
		return false
	}
	r.done <- admitResult{err: err}
	return true
}

// notSent is the answer of a claim whose deadline passed before it was
// sent.
var notSent = fmt.Errorf("%w: %w", ErrNotSent, context.DeadlineExceeded)

// dispatch gathers the waiting claims into batches and hands each to a
// free worker: at once when none is in flight or fillClaims wait, else
// when a pipeline returns. The claims waiting are in arrival order, and
// so (one timeout for all) in order of their deadlines: one timer, on the
// first's, drops those whose deadline passed, however long the pipelines
// in flight take.
func (b *Batcher) dispatch() {
	defer b.wg.Done()
	defer close(b.sends)
	free := make([][]*admitReq, 0, b.cfg.Workers)
	for range b.cfg.Workers {
		free = append(free, make([]*admitReq, 0, b.cfg.MaxBatch))
	}
	inFlight := 0
	var queue []*admitReq // waiting, oldest first
	expiry := time.NewTimer(time.Hour)
	expiry.Stop()
	armed := time.Time{} // the deadline the timer is set for (zero: none)
	for {
		if len(queue) > 0 && inFlight < b.cfg.Workers && (inFlight == 0 || len(queue) >= fillClaims) {
			batch := free[len(free)-1]
			free = free[:len(free)-1]
			n := min(len(queue), b.cfg.MaxBatch)
			batch = append(batch, queue[:n]...)
			clear(queue[:n])
			queue = queue[n:]
			b.sends <- batch
			inFlight++
			continue
		}
		if len(queue) == 0 {
			queue = queue[:0:0] // let a long backlog's array go
		}
		if len(queue) > 0 && !queue[0].deadline.Equal(armed) {
			armed = queue[0].deadline
			expiry.Reset(time.Until(armed))
		}
		select {
		case r := <-b.reqs:
			queue = append(queue, r)
			// Take what else is waiting without blocking.
			for len(queue) < b.cfg.MaxBatch {
				select {
				case r := <-b.reqs:
					queue = append(queue, r)
					continue
				default:
				}
				break
			}
		case done := <-b.returned:
			inFlight--
			free = append(free, done[:0])
		case <-expiry.C:
			armed = time.Time{}
			now := time.Now()
			k := 0
			for k < len(queue) && !now.Before(queue[k].deadline) {
				drop(queue[k], notSent)
				k++
			}
			// A claim whose caller gave up before its deadline is dropped
			// by its caller; it leaves the queue here or when sent.
			clear(queue[:k])
			queue = queue[k:]
		case <-b.stop:
			expiry.Stop()
			for _, r := range queue {
				drop(r, ErrBatcherClosed)
			}
			for {
				select {
				case r := <-b.reqs:
					drop(r, ErrBatcherClosed)
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
	claims := make([]Claim, 0, b.cfg.MaxBatch)
	due := new(replyTimer) // this worker's, reused round trip after round trip
	for batch := range b.sends {
		claims = claims[:0]
		// Claims whose caller gave up, or whose deadline passed, before
		// sending are not sent: they were never admitted.
		live := batch[:0]
		now := time.Now()
		for _, r := range batch {
			if err := r.ctx.Err(); err != nil || !now.Before(r.deadline) {
				drop(r, fmt.Errorf("%w: %w", ErrNotSent, cmp.Or(err, context.DeadlineExceeded)))
				continue
			}
			if !r.state.CompareAndSwap(reqWaiting, reqSent) {
				continue // its caller gave up on it
			}
			live = append(live, r)
			claims = append(claims, r.claim)
		}
		b.send(live, claims, due)
		if due.wasFreed() {
			return // a worker started in its place when its round trip was held
		}
		clear(batch)
		b.returned <- batch
	}
}

// freeWorker frees the place of a worker whose round trip a master holds: a
// worker starts in its place, and the dispatcher is handed a batch slice
// as if the round trip had returned. The held worker ends when its round
// trip does.
func (b *Batcher) freeWorker() {
	b.wg.Add(1) // the held worker's count is still held: Close waits for both
	go b.work()
	b.returned <- make([]*admitReq, 0, b.cfg.MaxBatch)
}

// send sends claims (of live) in one round trip per master, the largest
// group from here and the others beside it, and answers each; it returns
// when the largest group is answered.
func (b *Batcher) send(live []*admitReq, claims []Claim, due *replyTimer) {
	if len(live) == 0 {
		return
	}
	// On a cluster, a worker whose round trip a master holds past the
	// claims' Timeout (hung, or being failed over: the round trip waits
	// for its reply, up to the admission connection's read timeout) has a
	// worker started in its place: the other masters' claims are not held
	// behind one master. A single Redis has no other master to serve, and
	// its workers wait: the claims behind them are answered not sent,
	// which is the truth.
	if _, ok := b.adm.c.(*redis.ClusterClient); ok {
		due.freeAt(time.Now().Add(b.cfg.Timeout), b.freeWorker)
	}
	groups := b.adm.byMaster(claims)
	if groups == nil {
		b.admit(live, claims, due)
		return
	}
	// Each master's claims go in a pipeline of their own: a cluster
	// pipeline returns when its slowest node does, so a master being
	// failed over would hold up every other master's claims. The worker
	// is free again when the largest group returns (or is freed).
	for k := len(groups) - 1; k >= 0; k-- {
		rs, cs := make([]*admitReq, len(groups[k])), make([]Claim, len(groups[k]))
		for j, i := range groups[k] {
			rs[j], cs[j] = live[i], claims[i]
		}
		if k == 0 {
			b.admit(rs, cs, due)
			break
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.admit(rs, cs, new(replyTimer))
		}()
	}
}

// admit sends claims (of reqs) in one round trip, which ends at its reply
// or its connection's read timeout (no deadline of its own: the admission
// client's read timeout is how long a reply is listened for), and answers
// each: by its reply, or, its reply due (replyBy) before it came,
// ErrOutcomeUnknown at once (due) and its outcome to Late when the reply
// comes.
func (b *Batcher) admit(reqs []*admitReq, claims []Claim, due *replyTimer) {
	due.start(reqs)
	out, errs, err := b.adm.admitBatch(context.Background(), claims)
	due.stop()
	err = b.uncut(err)
	for i := range errs {
		errs[i] = b.uncut(errs[i])
	}
	var detours []int
	var late []LateOutcome
	for i, r := range reqs {
		res := admitResult{err: err}
		switch {
		case err != nil:
		case b.adm.detoured(claims[i], errs[i]):
			detours = append(detours, i)
			continue
		default:
			res = admitResult{a: out[i], err: errs[i]}
		}
		if !b.answer(r, res) {
			late = append(late, LateOutcome{Claim: claims[i], Admission: res.a, Err: res.err})
		}
	}
	if len(late) > 0 && b.cfg.Late != nil {
		b.cfg.Late(late)
	}
	if len(detours) > 0 {
		found := time.Now() // their admissions were refused by now
		for _, i := range detours {
			b.wg.Add(1)
			go b.detour(reqs[i], claims[i], errs[i], found)
		}
	}
}

// uncut is err, a round trip's, as its claims' answer: once CloseBy cut
// the admission connections, a round trip that failed was perhaps sent
// (its call may run), so ErrNotSent becomes ErrOutcomeUnknown.
func (b *Batcher) uncut(err error) error {
	if err != nil && b.cut.Load() && errors.Is(err, ErrNotSent) {
		return fmt.Errorf("%w: its connection closed at shutdown (%v)", ErrOutcomeUnknown, err)
	}
	return err
}

// answer answers r, sent, res; false when its caller was answered
// ErrOutcomeUnknown already (res is its late outcome).
func (b *Batcher) answer(r *admitReq, res admitResult) bool {
	if !r.state.CompareAndSwap(reqSent, reqAnswered) {
		return false
	}
	r.done <- res
	return true
}

// replyTimer answers ErrOutcomeUnknown, at their replyBy, the claims of a
// round trip whose reply has not come: one timer a round trip, set for
// the earliest reply due, and again for the next; a worker's is reused
// from round trip to round trip (no allocation a claim). A fire that
// runs late, into the next round trip, only answers what is due then.
//
// A worker's timer also frees the worker's place (free) when its
// round trip lasts past freeBy, if set (freeAt, before start).
type replyTimer struct {
	mu     sync.Mutex
	reqs   []*admitReq
	t      *time.Timer
	ended  bool
	freeBy time.Time
	free   func()
	freed  bool
}

// freeAt has the next round trip call free if it lasts past at.
func (rt *replyTimer) freeAt(at time.Time, free func()) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.freeBy, rt.free = at, free
}

// start watches reqs, sent now.
func (rt *replyTimer) start(reqs []*admitReq) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.reqs, rt.ended, rt.freed = reqs, false, false
	rt.arm()
}

// wasFreed says whether the last round trip freed its worker's place.
func (rt *replyTimer) wasFreed() bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.freed
}

// arm sets the timer for the earliest reply due of the claims still sent,
// or the freeing, whichever is first.
func (rt *replyTimer) arm() {
	var first time.Time
	for _, r := range rt.reqs {
		if r.state.Load() == reqSent && (first.IsZero() || r.replyBy.Before(first)) {
			first = r.replyBy
		}
	}
	if !rt.freeBy.IsZero() && !rt.freed && (first.IsZero() || rt.freeBy.Before(first)) {
		first = rt.freeBy
	}
	if first.IsZero() {
		return
	}
	if rt.t == nil {
		rt.t = time.AfterFunc(time.Until(first), rt.fire)
		return
	}
	rt.t.Reset(time.Until(first))
}

func (rt *replyTimer) fire() {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.ended {
		return
	}
	now := time.Now()
	for _, r := range rt.reqs {
		if !now.Before(r.replyBy) && r.state.CompareAndSwap(reqSent, reqLate) {
			r.done <- admitResult{err: errNoReply}
		}
	}
	if !rt.freeBy.IsZero() && !rt.freed && !now.Before(rt.freeBy) {
		rt.freed = true
		rt.free()
	}
	rt.arm()
}

// errNoReply answers a claim whose reply did not come by its replyBy.
var errNoReply = fmt.Errorf("%w: no reply within the claim's time", ErrOutcomeUnknown)

// stop ends the watch: the round trip returned.
func (rt *replyTimer) stop() {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.ended, rt.reqs, rt.freeBy, rt.free = true, nil, time.Time{}, nil
	if rt.t != nil {
		rt.t.Stop()
	}
}

// byMaster groups claims (their indexes) by the cluster master that
// decides them, largest group first; nil (one group, the whole batch) when
// the client is not a cluster's, the claims have one master, or the map of
// slots is not known.
func (adm *Admitter) byMaster(claims []Claim) [][]int {
	cc, ok := adm.c.(*redis.ClusterClient)
	if !ok || len(claims) < 2 {
		return nil
	}
	ctx := context.Background()
	group := map[int]int{}     // partition -> its group
	master := map[string]int{} // master -> its group
	var groups [][]int
	for i, c := range claims {
		p := adm.userBucketOf(c.VoucherID, c.UserID, adm.s.KnownBuckets(c.VoucherID)).P
		k, seen := group[p]
		if !seen {
			n, err := cc.MasterForKey(ctx, rdb.StreamKey(p))
			if err != nil {
				return nil
			}
			if k, seen = master[n.Options().Addr]; !seen {
				k = len(groups)
				master[n.Options().Addr] = k
				groups = append(groups, nil)
			}
			group[p] = k
		}
		groups[k] = append(groups[k], i)
	}
	if len(groups) == 1 {
		return nil
	}
	slices.SortFunc(groups, func(a, b []int) int { return len(b) - len(a) })
	return groups
}
