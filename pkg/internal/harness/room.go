package harness

// A sale behind a waiting room end to end with the real binaries: users
// join the room (many in its pre-queue), poll it as its answers say, and
// claim once admitted; a group of scripted fast clients polls and claims
// as fast as it can. The same crowd can run on the same sale without a
// room, for the comparison the report makes: how much of the stock the
// fast clients win with the room and without it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/flashsale/flashsale/pkg/backoff"
	"github.com/flashsale/flashsale/pkg/room"
)

// RoomConfig shapes a sale with (or without) a waiting room.
type RoomConfig struct {
	Stock int64
	Users int // in all, the fast ones included
	Fast  int // scripted clients: join first, poll and claim as fast as they can
	// NoRoom runs the same crowd on a sale without a room: everyone claims
	// from the start, the fast clients in a tight loop.
	NoRoom bool
	// The room: admissions per second, the pre-queue, a pass's life.
	AdmitPerSecond int64
	Prequeue       time.Duration
	Pass           time.Duration
	// Arrivals: people keep arriving until this long after the start
	// (the first from the pre-queue's opening).
	Arrivals time.Duration
	// NoShow is the share of admitted people who never buy.
	NoShow float64
	// Leave is the share of people who leave the queue once they joined
	// (never ask again).
	Leave float64
	// Conns bounds the clients' connections to the gateway.
	Conns int
	Seed  uint64
}

// RoomReport is a room sale checked against the sale's invariants, with
// the room's own figures.
type RoomReport struct {
	Config RoomConfig
	Check  *Report // the e2e invariants over the orders the 202s announced
	// Joined: places given; Prequeued: joins in the pre-queue.
	Joined, Prequeued int64
	// AdmittedSeen: people who were told admitted; Bought: 202s.
	AdmittedSeen, Bought int64
	// FastBought: the fast clients' 202s; FastShare their share of the stock.
	FastBought int64
	FastShare  float64
	// Fairness, among the people admitted: the order the room admitted
	// them in (the start of the pass each was told) against their queue
	// order, as Kendall's tau-b and the share of pairs out of order; and
	// the order they learned it in (their polls), likewise.
	// PrequeueArrivalTau is the pre-queue's places against its arrival
	// order (near 0: shuffled).
	Tau, Inversions         float64
	TauTold, InversionsTold float64
	PrequeueArrivalTau      float64
	// SoldOut: from the last unit taken (the last 202) until each waiter
	// still in the queue was told sold_out, ms; Waiters how many there were.
	SoldOut *hdrhistogram.Histogram
	Waiters int64
	// Story: the room's story in the sale's report (GET …/report's
	// queue), read once the sale is over (and once it counts ToldSoldOut).
	Story *room.Story
	// VoucherID is the sale's voucher.
	VoucherID string
	// Of the people whose place the room never admitted, ToldSoldOut:
	// those told sold_out; Gone: those who left the queue
	// (RoomConfig.Leave).
	ToldSoldOut, Gone int64
	// ETA: the first wait estimate (eta_ms) each admitted person was told,
	// against the wait they had from then until the room admitted their
	// place (read from the room's state every 20 ms while the sale runs).
	ETA ETAError
	// ETATold: people told an estimate (eta_ms) at least once while they
	// waited, admitted or not.
	ETATold int64
	// Requests by kind; Refused: claims answered not_admitted; Limited
	// and Unavailable: answers 429 and 503 to any request (joins, polls,
	// claims); Errors: transport errors and other 5xx.
	Joins, Polls, Claims, Refused, Limited, Unavailable, Errors int64
	Duration                                                    time.Duration
	// ErrorKinds counts Errors by what they were: "HTTP 500", "timeout",
	// or the error's text (the first few kinds).
	ErrorKinds map[string]int64
	errMu      sync.Mutex
}

// failed counts one request that failed with status or err.
func (r *RoomReport) failed(status int, err error) {
	atomic.AddInt64(&r.Errors, 1)
	kind := fmt.Sprintf("HTTP %d", status)
	var timeout interface{ Timeout() bool }
	switch {
	case errors.As(err, &timeout) && timeout.Timeout():
		kind = "timeout"
	case err != nil:
		kind = err.Error()
	}
	r.errMu.Lock()
	defer r.errMu.Unlock()
	if _, ok := r.ErrorKinds[kind]; ok || len(r.ErrorKinds) < 8 {
		r.ErrorKinds[kind]++
	}
}

// personal is one simulated person's plan and what they saw.
type personal struct {
	user      string
	fast      bool
	joinAt    time.Time
	reaction  time.Duration
	noShow    bool
	leaves    bool // leaves once joined
	token     string
	queueTok  string
	joinedSeq int64     // the order the join was answered in
	admitted  time.Time // first told admitted
	passEnd   time.Time // the pass's end the room told: its admission, plus the pass
	bought    int64     // order id
	boughtAt  time.Time
	soldOutAt time.Time // first told sold_out
	// etaAt is when the person was first told an estimate of their wait
	// (eta_ms), and eta that estimate.
	etaAt time.Time
	eta   time.Duration
	// ticket is the person's place in the queue (roomFairness reads it).
	ticket int64
}

// frontWatch records when the room admitted each place: its state's
// front (places admitted so far), read every 20 ms.
type frontWatch struct {
	mu    sync.Mutex
	at    []time.Time
	front []int64
}

func (s *Stack) watchFront(ctx context.Context, v int64) *frontWatch {
	fw := &frontWatch{}
	state, _ := room.NewStore(s.RDB, 0).Keys(v)
	go func() {
		for backoff.Sleep(ctx, 20*time.Millisecond) == nil {
			n, err := s.RDB.Client().HGet(ctx, state, "front").Int64()
			if err != nil {
				continue
			}
			fw.mu.Lock()
			if len(fw.front) == 0 || n > fw.front[len(fw.front)-1] {
				fw.at, fw.front = append(fw.at, time.Now()), append(fw.front, n)
			}
			fw.mu.Unlock()
		}
	}()
	return fw
}

// admittedAt is when place t was first seen admitted (zero: never).
func (fw *frontWatch) admittedAt(t int64) time.Time {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	i, _ := slices.BinarySearch(fw.front, t)
	if i == len(fw.front) {
		return time.Time{}
	}
	return fw.at[i]
}

// RunRoom runs cfg's sale on s and checks it.
func (s *Stack) RunRoom(ctx context.Context, cfg RoomConfig) (*RoomReport, error) {
	if cfg.Users <= cfg.Fast || cfg.Stock <= 0 || cfg.AdmitPerSecond <= 0 {
		return nil, fmt.Errorf("a room sale needs more users than fast ones, stock and a rate")
	}
	cfg.Conns = max(cfg.Conns, 64)
	rng := rand.New(rand.NewPCG(cfg.Seed, 11))
	// The crowd's tokens are signed before the clock is read: 20,000
	// signatures took longer than the lead and the pre-queue together on
	// a loaded machine, and nobody joined before the start.
	s.Tokens(cfg.Users)
	lead := 2 * time.Second // from the creation to the pre-queue's opening
	open := time.Now().Add(lead)
	start := open.Add(cfg.Prequeue)
	spec := VoucherSpec{Name: "room", Stock: cfg.Stock, PerUserLimit: 1,
		StartsAt: start.UTC().Format(time.RFC3339Nano), EndsAt: start.Add(10 * time.Minute).UTC().Format(time.RFC3339Nano)}
	if !cfg.NoRoom {
		spec.WaitingRoom = &room.Config{AdmitPerSecond: cfg.AdmitPerSecond, PrequeueSeconds: int64(cfg.Prequeue / time.Second),
			PassSeconds: max(int64(cfg.Pass/time.Second), 1)}
	}
	v, err := s.CreateVoucher(ctx, spec)
	if err != nil {
		return nil, err
	}
	people := make([]*personal, cfg.Users)
	span := cfg.Prequeue + cfg.Arrivals
	for i := range people {
		p := &personal{user: userName(i), fast: i < cfg.Fast}
		if p.fast {
			p.joinAt = open.Add(time.Duration(rng.IntN(50)) * time.Millisecond)
		} else {
			p.joinAt = open.Add(time.Duration(rng.Int64N(int64(span))))
			p.reaction = 150*time.Millisecond + time.Duration(rng.Int64N(int64(time.Second)))
			p.noShow = rng.Float64() < cfg.NoShow
			p.leaves = rng.Float64() < cfg.Leave
		}
		p.token = s.Token(p.user)
		people[i] = p
	}
	rep := &RoomReport{Config: cfg, SoldOut: hdrhistogram.New(0, 600_000, 3), ErrorKinds: map[string]int64{}}
	client := NewClient(s.URL, cfg.Conns)
	// The crowd shares cfg.Conns connections; a request's timeout starts
	// once it has one (Client). A minute, not a buyer's 10 s, for a
	// gateway sharing two busy cores with its own crowd; it still catches
	// one that stops answering, and 5xx and broken connections count as
	// before (ErrorKinds says which).
	client.HTTP.Timeout = time.Minute
	// Claims go on connections of their own: a real buyer's claim does
	// not wait behind other people's polls, and on a loaded machine a
	// claim queued behind 20,000 pollers outlasted its pass (seen under
	// stress-ng: 2,961 passes lapsed, the fast clients won 5.6 %).
	buys := NewClient(s.URL, max(cfg.Conns/4, 16))
	buys.HTTP.Timeout = time.Minute
	vid := strconv.FormatInt(v, 10)
	rep.VoucherID = vid
	watch := s.WatchPersisted(ctx, v)
	var seq atomic.Int64
	// Each person shops until they are done (bought, heard sold_out, or
	// left); the deadline only stops a crowd that never finishes. It is
	// long, well inside the sale's 10 minutes: a suite run with an empty
	// build cache, two cores compiling beside it, took 3 minutes 18 s to
	// sell 499 of the 500 units (polls answered at 413/s, so most of those
	// admitted heard it after their pass had lapsed), and a shorter one
	// failed a room that was only slow.
	deadline := start.Add(cfg.Arrivals + 8*time.Minute)
	runCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	began := time.Now()
	var fw *frontWatch
	if !cfg.NoRoom {
		fw = s.watchFront(runCtx, v)
	}
	var wg sync.WaitGroup
	for _, p := range people {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if cfg.NoRoom {
				s.shopWithoutRoom(runCtx, buys, vid, p, start, rep)
			} else {
				s.shopInRoom(runCtx, client, buys, vid, p, &seq, rep)
			}
		}()
	}
	wg.Wait()
	rep.Duration = time.Since(began)
	if ctx.Err() != nil {
		return rep, ctx.Err()
	}

	sale := &SaleResult{Rejected: map[string]int64{}, Orders: map[int64]string{}, Amounts: map[int64]int64{}}
	var lastUnit time.Time
	for _, p := range people {
		if p.bought != 0 {
			sale.Orders[p.bought] = p.user
			sale.Admitted++
			rep.Bought++
			if p.fast {
				rep.FastBought++
			}
			if p.boughtAt.After(lastUnit) {
				lastUnit = p.boughtAt
			}
		}
		if !p.admitted.IsZero() {
			rep.AdmittedSeen++
		}
		if !p.etaAt.IsZero() {
			rep.ETATold++
		}
	}
	sale.Requests, sale.Errors, sale.LastAdmit, sale.Duration = rep.Claims, rep.Errors, lastUnit, rep.Duration
	rep.FastShare = float64(rep.FastBought) / float64(cfg.Stock)
	if !cfg.NoRoom {
		for _, p := range people {
			if p.bought == 0 && !p.soldOutAt.IsZero() {
				rep.Waiters++
				_ = rep.SoldOut.RecordValue(max(p.soldOutAt.Sub(lastUnit).Milliseconds(), 0))
			}
		}
		if err := s.roomFairness(ctx, v, people, rep); err != nil {
			return rep, err
		}
		rep.ETA = etaError(people, fw)
		if rep.Story, err = s.roomStory(ctx, client, vid, people, rep); err != nil {
			return rep, err
		}
	}
	persisted, err := watch.Wait(ctx, sale.Admitted, 2*time.Minute)
	if err != nil {
		return rep, err
	}
	if rep.Check, err = s.Check(ctx, v, sale); err != nil {
		return rep, err
	}
	rep.Check.PersistedAt = persisted
	return rep, nil
}

// roomStory reads the sale's report's story of the room, once it counts
// every person told sold_out (the gateway records them with its next tick
// of the room), and counts what the crowd saw of it.
func (s *Stack) roomStory(ctx context.Context, client *Client, vid string, people []*personal, rep *RoomReport) (*room.Story, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var report struct {
			Queue *room.Story `json:"queue"`
		}
		status, err := client.Do(ctx, "GET", "/admin/v1/vouchers/"+vid+"/report", s.AdminToken, nil, &report)
		if err != nil || status != http.StatusOK {
			return nil, fmt.Errorf("the sale's report: %d %v", status, err)
		}
		q := report.Queue
		if q == nil {
			return nil, nil
		}
		rep.ToldSoldOut, rep.Gone = 0, 0
		for _, p := range people {
			switch {
			case p.ticket <= q.Admitted:
			case !p.soldOutAt.IsZero():
				rep.ToldSoldOut++
			case p.leaves:
				rep.Gone++
			}
		}
		if q.ToldSoldOut >= rep.ToldSoldOut || time.Now().After(deadline) {
			return q, nil
		}
		if err := backoff.Sleep(ctx, 50*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// shopInRoom is one person at a sale with a room: join, poll as told (a
// fast client every 50 ms, trying to claim all along), claim once
// admitted (a person after their reaction time; some never do).
func (s *Stack) shopInRoom(ctx context.Context, c, buys *Client, vid string, p *personal, seq *atomic.Int64, rep *RoomReport) {
	if !sleepUntil(ctx, p.joinAt) {
		return
	}
	queue := "/v1/vouchers/" + vid + "/queue"
	var a queueAnswer
	for {
		// A join is idempotent (joining again answers the same place): the
		// key makes Go's client send it again on a fresh connection when
		// the server had closed the one it was written on (an EOF, seen
		// once in 20,000 joins on a loaded machine); the gateway reads no
		// key on a join.
		status, err := c.Do(ctx, "POST", queue, p.token, nil, &a, "Idempotency-Key", "join-"+p.user)
		atomic.AddInt64(&rep.Joins, 1)
		if ok := countStatus(rep, status, err); ok {
			break
		}
		if backoff.Sleep(ctx, 100*time.Millisecond) != nil {
			return
		}
	}
	p.joinedSeq = seq.Add(1)
	p.queueTok = a.QueueToken
	if p.leaves && a.State != room.SoldOut { // one told sold_out at the door heard it: the loop records it
		return
	}
	for ctx.Err() == nil {
		if a.State == room.Waiting && a.EtaMs != nil && p.etaAt.IsZero() {
			p.etaAt, p.eta = time.Now(), time.Duration(*a.EtaMs)*time.Millisecond
		}
		switch a.State {
		case room.Admitted:
			if p.admitted.IsZero() {
				p.admitted = time.Now()
				p.passEnd, _ = time.Parse(time.RFC3339Nano, a.PassExpires)
			}
			if p.noShow {
				return // leaves; the pass lapses
			}
			if !p.fast && backoff.Sleep(ctx, p.reaction) != nil {
				return
			}
			if done := s.claimOnce(ctx, buys, vid, p, rep); done {
				return
			}
		case room.SoldOut:
			p.soldOutAt = time.Now()
			return
		case room.Closed, room.Lapsed:
			return
		}
		wait := time.Duration(a.RetryAfterMs) * time.Millisecond
		if p.fast {
			wait = 50 * time.Millisecond
			if a.State == room.Waiting {
				s.claimOnce(ctx, buys, vid, p, rep) // refused: no pass
			}
		}
		if backoff.Sleep(ctx, wait) != nil {
			return
		}
		for {
			status, err := c.Do(ctx, "GET", queue, "", nil, &a, room.Header, p.queueTok) // the token alone
			atomic.AddInt64(&rep.Polls, 1)
			if countStatus(rep, status, err) || ctx.Err() != nil {
				break
			}
			if backoff.Sleep(ctx, 200*time.Millisecond) != nil {
				return
			}
		}
	}
}

// shopWithoutRoom is one person at the same sale without a room: from the
// start (or their arrival) a person claims once after their reaction
// time; a fast client claims every 10 ms from just before the start until
// it has a unit or the sale is sold out.
func (s *Stack) shopWithoutRoom(ctx context.Context, c *Client, vid string, p *personal, start time.Time, rep *RoomReport) {
	at := p.joinAt
	if at.Before(start) {
		at = start
	}
	if p.fast {
		at = start.Add(-20 * time.Millisecond)
	} else {
		at = at.Add(p.reaction)
	}
	if !sleepUntil(ctx, at) {
		return
	}
	for ctx.Err() == nil {
		if done := s.claimOnce(ctx, c, vid, p, rep); done || !p.fast {
			return
		}
		if backoff.Sleep(ctx, 10*time.Millisecond) != nil {
			return
		}
	}
}

// claimOnce claims p's unit; done when bought or sold out.
func (s *Stack) claimOnce(ctx context.Context, c *Client, vid string, p *personal, rep *RoomReport) (done bool) {
	var body struct {
		OrderID string `json:"order_id"`
		Error   string `json:"error"`
	}
	// One key for all of a person's claims, as a real client keeps one
	// per purchase: a refusal is not remembered under it, an admission is
	// answered again. With it Go's client also sends a claim again on a
	// fresh connection when the server had closed the one it was written
	// on (a request with an Idempotency-Key is replayable).
	status, err := c.Do(ctx, "POST", "/v1/vouchers/"+vid+"/orders", p.token, nil, &body, room.Header, p.queueTok,
		"Idempotency-Key", "buy-"+p.user)
	atomic.AddInt64(&rep.Claims, 1)
	if !countStatus(rep, status, err) {
		return false
	}
	switch {
	case status == http.StatusAccepted:
		id, err := strconv.ParseInt(body.OrderID, 10, 64)
		if err != nil {
			rep.failed(status, err)
			return true
		}
		p.bought, p.boughtAt = id, time.Now()
		return true
	case body.Error == "not_admitted":
		atomic.AddInt64(&rep.Refused, 1)
		return false
	case body.Error == "sold_out", body.Error == "user_limit", body.Error == "ended":
		return true
	}
	return false // not_started: try again
}

// countStatus counts what is not an answer to act on (429, 5xx,
// transport errors) and reports whether status is one.
func countStatus(rep *RoomReport, status int, err error) bool {
	switch {
	case err != nil || (status >= 500 && status != http.StatusServiceUnavailable):
		rep.failed(status, err)
		return false
	case status == http.StatusTooManyRequests:
		atomic.AddInt64(&rep.Limited, 1)
		return false
	case status == http.StatusServiceUnavailable:
		atomic.AddInt64(&rep.Unavailable, 1)
		return false
	}
	return true
}

type queueAnswer struct {
	State        string `json:"state"`
	Position     int64  `json:"position"`
	RetryAfterMs int64  `json:"retry_after_ms"`
	QueueToken   string `json:"queue_token"`
	PassExpires  string `json:"pass_expires_at"`
	EtaMs        *int64 `json:"eta_ms"`
}

// ETAError is how far wait estimates were from the waits that followed.
type ETAError struct {
	N int // people admitted who had been told an estimate
	// AbsP50, AbsP90: the estimate's error either way; BiasP50: the
	// median of estimate less wait (above 0: it said longer).
	AbsP50, AbsP90, BiasP50 time.Duration
	// RelP50: the median of the error over the wait.
	RelP50 float64
	// WaitP50: the median wait estimated.
	WaitP50 time.Duration
}

// etaError compares each person's first estimate with the wait that
// followed it, until the room admitted their place.
func etaError(people []*personal, fw *frontWatch) ETAError {
	var abs, bias, wait []time.Duration
	var rel []float64
	for _, p := range people {
		if p.etaAt.IsZero() || p.ticket == 0 {
			continue
		}
		at := fw.admittedAt(p.ticket)
		if at.IsZero() {
			continue
		}
		w := max(at.Sub(p.etaAt), 0)
		d := p.eta - w
		abs, bias, wait = append(abs, max(d, -d)), append(bias, d), append(wait, w)
		rel = append(rel, float64(max(d, -d))/float64(max(w, time.Second)))
	}
	out := ETAError{N: len(abs)}
	if out.N == 0 {
		return out
	}
	for _, xs := range [][]time.Duration{abs, bias, wait} {
		slices.Sort(xs)
	}
	slices.Sort(rel)
	q := func(n int, f float64) int { return min(int(f*float64(n)), n-1) }
	out.AbsP50, out.AbsP90, out.BiasP50 = abs[q(len(abs), .5)], abs[q(len(abs), .9)], bias[q(len(bias), .5)]
	out.RelP50, out.WaitP50 = rel[q(len(rel), .5)], wait[q(len(wait), .5)]
	return out
}

// roomFairness reads everyone's queue place from Redis (the room's state
// and the pre-queue's shuffle) and compares it with the order they were
// told admitted, and the pre-queue's places with its arrival order.
func (s *Stack) roomFairness(ctx context.Context, v int64, people []*personal, rep *RoomReport) error {
	rs := room.NewStore(s.RDB, 0)
	snap, err := rs.Tick(ctx, v, time.Now())
	if err != nil {
		return err
	}
	_, waiters := rs.Keys(v)
	places, err := s.RDB.Client().HGetAll(ctx, waiters).Result()
	if err != nil {
		return err
	}
	rep.Joined, rep.Prequeued = int64(len(places)), snap.Pre
	ticket := map[string]int64{}
	byUser := make(map[string]*personal, len(people))
	for _, p := range people {
		byUser[p.user] = p
	}
	var preArrival, prePlace []float64
	for u, raw := range places {
		pl, err := room.ParsePlace(raw)
		if err != nil {
			return err
		}
		t, err := snap.Ticket(pl)
		if err != nil {
			return err
		}
		ticket[u] = t
		if p := byUser[u]; p != nil {
			p.ticket = t
		}
		if pl.Pre {
			preArrival, prePlace = append(preArrival, float64(pl.N)), append(prePlace, float64(t))
		}
	}
	rep.PrequeueArrivalTau, _ = kendall(preArrival, prePlace)
	var admitted, told, queued []float64
	for _, p := range people {
		if t, ok := ticket[p.user]; ok && !p.admitted.IsZero() {
			admitted, told = append(admitted, float64(p.passEnd.UnixNano())), append(told, float64(p.admitted.UnixNano()))
			queued = append(queued, float64(t))
		}
	}
	rep.Tau, rep.Inversions = kendall(admitted, queued)
	rep.TauTold, rep.InversionsTold = kendall(told, queued)
	return nil
}

// MinPrequeued is the fewest people in a pre-queue that tell a shuffle
// from arrival order: ShuffledTau(50) is 0.39, arrival order's tau 1.
const MinPrequeued = 50

// ShuffledTau bounds Kendall's tau of n places shuffled at random against
// their arrival order: four standard deviations of tau between two
// independent orders, sqrt(2(2n+5) / 9n(n-1)), so a shuffled pre-queue
// passes it on any machine but once in 30,000, however many joined in time.
func ShuffledTau(n int64) float64 {
	f := float64(n)
	return 4 * math.Sqrt(2*(2*f+5)/(9*f*(f-1)))
}

// kendall is Kendall's tau-b of x and y, and the share of all pairs that
// are discordant (ties in either are neither). O(n²): a sale's admitted,
// not its crowd.
func kendall(x, y []float64) (tau, discordant float64) {
	n := len(x)
	if n < 2 {
		return 1, 0
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		switch {
		case x[a] < x[b]:
			return -1
		case x[a] > x[b]:
			return 1
		}
		return 0
	})
	var con, dis, tx, ty float64
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			dx, dy := x[idx[j]]-x[idx[i]], y[idx[j]]-y[idx[i]]
			switch {
			case dx == 0 && dy == 0:
			case dx == 0:
				tx++
			case dy == 0:
				ty++
			case dx*dy > 0:
				con++
			default:
				dis++
			}
		}
	}
	pairs := float64(n) * float64(n-1) / 2
	den := math.Sqrt((con + dis + tx) * (con + dis + ty))
	if den == 0 {
		return 1, dis / pairs
	}
	return (con - dis) / den, dis / pairs
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	return backoff.Sleep(ctx, time.Until(t)) == nil
}

// Print writes the room's report lines, then the sale's.
func (r *RoomReport) Print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	c := r.Config
	if c.NoRoom {
		row("sale", fmt.Sprintf("no waiting room: %d users (%d fast) for %d units", c.Users, c.Fast, c.Stock))
	} else {
		row("sale", fmt.Sprintf("waiting room: %d users (%d fast) for %d units; %d admitted/s, pre-queue %s, pass %s",
			c.Users, c.Fast, c.Stock, c.AdmitPerSecond, c.Prequeue, c.Pass))
		row("room: joined / in the pre-queue", fmt.Sprintf("%d / %d", r.Joined, r.Prequeued))
		row("room: pre-queue place vs arrival (tau)", fmt.Sprintf("%.3f (0: shuffled; 1: arrival order)", r.PrequeueArrivalTau))
		row("room: told admitted / bought", fmt.Sprintf("%d / %d", r.AdmittedSeen, r.Bought))
		row("room: admission order vs queue order", fmt.Sprintf("tau-b %.4f, pairs out of order %.4f %% (by each pass's start)", r.Tau, 100*r.Inversions))
		row("room: order told vs queue order", fmt.Sprintf("tau-b %.4f, pairs out of order %.4f %% (as the polls learned it)", r.TauTold, 100*r.InversionsTold))
		if r.Waiters > 0 {
			row("room: told sold_out after the last unit", fmt.Sprintf("p50 %d ms, p99 %d ms, max %d ms (%d waiters)",
				r.SoldOut.ValueAtQuantile(50), r.SoldOut.ValueAtQuantile(99), r.SoldOut.Max(), r.Waiters))
		}
		if e := r.ETA; e.N > 0 {
			row("room: first wait estimate vs the wait", fmt.Sprintf("error p50 %s (%.0f %% of the wait), p90 %s; bias p50 %s; median wait %s (%d admitted)",
				e.AbsP50.Round(time.Millisecond), 100*e.RelP50, e.AbsP90.Round(time.Millisecond), e.BiasP50.Round(time.Millisecond),
				e.WaitP50.Round(time.Millisecond), e.N))
		}
		if q := r.Story; q != nil && q.TimeInQueue != nil {
			row("report: joined / admitted / bought / lapsed / waiting", fmt.Sprintf("%d / %d / %d / %d / %d", q.Joined, q.Admitted, q.Bought, q.Lapsed, q.Waiting))
			gone := "-"
			if q.GoneBeforeTurn != nil {
				gone = strconv.FormatInt(*q.GoneBeforeTurn, 10)
			}
			row("report: of the waiting, told sold_out / closed / gone", fmt.Sprintf("%d / %d / %s (the crowd: %d told sold_out, %d gone)",
				q.ToldSoldOut, q.ToldClosed, gone, r.ToldSoldOut, r.Gone))
			row("report: time in the queue of the admitted", fmt.Sprintf("p50 %d s, p99 %d s, max %d s", q.TimeInQueue.P50, q.TimeInQueue.P99, q.TimeInQueue.Max))
		}
		row("room: told a wait estimate", fmt.Sprintf("%d people", r.ETATold))
		row("room: joins / polls", fmt.Sprintf("%d / %d", r.Joins, r.Polls))
		row("room: claims refused not_admitted", r.Refused)
	}
	row("fast clients' share of the stock", fmt.Sprintf("%.2f %% (%d units)", 100*r.FastShare, r.FastBought))
	row("claims", r.Claims)
	row("requests of any kind answered 429 / 503", fmt.Sprintf("%d / %d (retried after Retry-After)", r.Limited, r.Unavailable))
	row("took", r.Duration.Round(time.Millisecond))
	for _, k := range slices.Sorted(maps.Keys(r.ErrorKinds)) {
		row("requests failed: "+k, r.ErrorKinds[k])
	}
	tw.Flush()
	if r.Check != nil {
		r.Check.Print(w)
	}
}

// Violations: the sale's invariants and the room's: every unit sold
// (nobody left waiting for stock there was), fast clients no better off
// than their numbers, admission in queue order.
func (r *RoomReport) Violations() []string {
	var v []string
	if r.Check == nil {
		return []string{"the sale was not checked"}
	}
	v = append(v, r.Check.Violations()...)
	if r.Config.NoRoom {
		return v
	}
	add := func(cond bool, format string, args ...any) {
		if cond {
			v = append(v, fmt.Sprintf(format, args...))
		}
	}
	add(r.Bought != r.Config.Stock, "%d units sold of %d", r.Bought, r.Config.Stock)
	add(r.Errors > 0, "%d requests failed (transport or 5xx)", r.Errors)
	add(r.Inversions > 0.05, "%.2f %% of admitted pairs out of queue order", 100*r.Inversions)
	add(r.Prequeued >= MinPrequeued && r.PrequeueArrivalTau > ShuffledTau(r.Prequeued),
		"the pre-queue kept its arrival order (tau %.3f of %d, above %.3f)", r.PrequeueArrivalTau, r.Prequeued, ShuffledTau(r.Prequeued))
	return v
}
