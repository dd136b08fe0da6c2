package gateway

// The waiting room's HTTP side (pkg/room): joining and polling the queue,
// and the pass a claim on a voucher with a room must hold, checked here
// before the admission script whenever this gateway knows the room.

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/room"
)

var (
	errNotAdmitted = &apiError{http.StatusForbidden, "not_admitted",
		"this voucher has a waiting room: join it (POST /v1/vouchers/{id}/queue) and claim once admitted, with its token in " + room.Header}
	errNotInQueue  = &apiError{http.StatusNotFound, "not_in_queue", "you have not joined this voucher's waiting room"}
	errNoRoom      = &apiError{http.StatusNotFound, "no_waiting_room", "this voucher has no waiting room: claim it directly"}
	errQueueClosed = &apiError{http.StatusConflict, "ended", "the sale has ended"}
	errQueueEarly  = &apiError{http.StatusConflict, "not_started", "the waiting room opens prequeue_seconds before the sale starts"}
	errQueueFull   = &apiError{http.StatusConflict, "queue_full", "the waiting room holds as many people as it takes (FLASHSALE_ROOM_MAX_WAITERS): it admits none more"}
	errBadQueue    = &apiError{http.StatusForbidden, "not_admitted", "the queue token in " + room.Header + " is not one for you and this voucher: join again without it"}
)

// waitingRoom checks room c for voucher v and returns it as stored.
func waitingRoom(v db.Voucher, c *room.Config) (string, error) {
	if err := c.Validate(); err != nil {
		return "", badRequest("invalid_field", err.Error())
	}
	switch {
	case v.IsDraw():
		return "", badRequest("invalid_field", "a draw has no waiting room: its entries are not first come, first served")
	case v.StockBuckets > 1:
		return "", badRequest("invalid_field", "stock_buckets must be 1 with a waiting room: the room meters the claims, so the stock need not be spread")
	}
	return c.Encode(), nil
}

// roomTick is how often a gateway refreshes each room it serves (the
// room's clock runs in Redis; this is how stale a poll's answer may be),
// and roomIdle how long a room nobody asked this gateway about stays.
const (
	roomTick = 100 * time.Millisecond
	roomIdle = 30 * time.Second
)

// rooms are the waiting rooms this gateway serves: each one's last state.
// A claim reads the map without a lock and without allocating (a
// sync.Map would box the voucher id); rooms come and go rarely, so a
// change copies it.
type rooms struct {
	m     atomic.Pointer[map[int64]*roomEntry]
	mu    sync.Mutex // serializes changes of m
	store *room.Store
	now   func() time.Time
}

// entries is the current map (nil: none yet).
func (rs *rooms) entries() map[int64]*roomEntry {
	if m := rs.m.Load(); m != nil {
		return *m
	}
	return nil
}

// change replaces the map with f's change of a copy.
func (rs *rooms) change(f func(map[int64]*roomEntry)) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	old := rs.entries()
	next := make(map[int64]*roomEntry, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	f(next)
	rs.m.Store(&next)
}

type roomEntry struct {
	snap atomic.Pointer[room.Snapshot]
	// gone, when set, is why the voucher has no room to answer from
	// (room.ErrNoRoom: taken away; rdb.ErrVoucherNotFound): polls are
	// answered that from here, and each tick asks Redis again.
	gone atomic.Pointer[error]
	seen atomic.Int64 // unix ns of the last request about it
}

// known is the entry's state, or why it has none.
func (e *roomEntry) known() (*room.Snapshot, error) {
	if err := e.gone.Load(); err != nil {
		return nil, *err
	}
	return e.snap.Load(), nil
}

// set records a tick's answer: a state, or why there is none.
func (e *roomEntry) set(s *room.Snapshot, err error) {
	if err != nil {
		e.gone.Store(&err)
		e.snap.Store(nil)
		return
	}
	e.snap.Store(s)
	e.gone.Store(nil)
}

// of returns voucher v's entry, nil when this gateway knows of no room.
func (rs *rooms) of(v int64) *roomEntry {
	re := rs.entries()[v]
	if re == nil {
		return nil
	}
	re.seen.Store(rs.now().UnixNano())
	return re
}

// learn records s as voucher v's room's state.
func (rs *rooms) learn(v int64, s *room.Snapshot) *roomEntry {
	re := rs.entries()[v]
	if re == nil {
		rs.change(func(m map[int64]*roomEntry) {
			if re = m[v]; re == nil {
				re = &roomEntry{}
				m[v] = re
			}
		})
	}
	re.seen.Store(rs.now().UnixNano())
	if s != nil {
		re.snap.Store(s)
	}
	return re
}

// state returns v's room's state: the last one, or one read now. A room
// taken away (or a voucher gone) is remembered as such, like a state, so
// that its polls cost Redis nothing until the next tick.
func (rs *rooms) state(ctx context.Context, v int64) (*room.Snapshot, error) {
	if e := rs.of(v); e != nil {
		if s, err := e.known(); s != nil || err != nil {
			return s, err
		}
	}
	s, err := rs.store.Tick(ctx, v, rs.now())
	if gone(err) {
		rs.learn(v, nil).set(nil, err)
	}
	if err != nil {
		return nil, err
	}
	rs.learn(v, s)
	return s, nil
}

// gone reports whether a room's tick failed because the voucher has no
// room to answer from: an answer to remember, not a failure.
func gone(err error) bool {
	return errors.Is(err, room.ErrNoRoom) || errors.Is(err, rdb.ErrVoucherNotFound)
}

// tick refreshes every room asked about lately, forgets the others and
// those that are gone, and publishes their figures.
func (g *Gateway) tickRooms(ctx context.Context) {
	now := g.now()
	for v, re := range g.rooms.entries() {
		if now.Sub(time.Unix(0, re.seen.Load())) > roomIdle {
			g.forgetRoom(v)
			continue
		}
		s, err := g.rooms.store.Tick(ctx, v, now)
		switch {
		case gone(err):
			re.set(nil, err)
			g.metrics.forgetRoom(v)
		case err != nil:
			g.log.Warn("waiting room tick failed", zap.Int64("voucher_id", v), zap.Error(err))
		default:
			re.set(s, nil)
			g.metrics.roomFigures(v, s)
		}
	}
}

func (g *Gateway) forgetRoom(v int64) {
	g.rooms.change(func(m map[int64]*roomEntry) { delete(m, v) })
	g.metrics.forgetRoom(v)
}

// roomPass is the pass of user's claim on voucher v: "" when this gateway
// knows no room for v (the admission script then decides: a voucher with
// a room refuses a claim without a pass, and this gateway learns of the
// room), else the pass as the script takes it, or errNotAdmitted.
func (g *Gateway) roomPass(r *http.Request, v int64, user string, now time.Time) (string, error) {
	e := g.rooms.of(v)
	if e == nil {
		return "", nil
	}
	s, err := e.known()
	if err != nil { // no room (as of the last tick): the script decides
		return "", nil
	}
	s, p, err := g.roomPlace(r, v, user, s)
	switch {
	case gone(err): // taken away: the script decides
		return "", nil
	case errors.Is(err, room.ErrNotInQueue):
		return "", errNotAdmitted
	case err != nil:
		return "", err
	}
	t, err := s.Ticket(p)
	if err != nil {
		return "", errNotAdmitted
	}
	exp := s.PassExpires(t)
	if exp.IsZero() || !now.Before(exp) {
		return "", errNotAdmitted
	}
	b := make([]byte, 0, 40)
	b = strconv.AppendInt(b, t, 10)
	b = append(b, ':')
	return string(strconv.AppendInt(b, exp.UnixMilli(), 10)), nil
}

// roomPlace is user's place in v's room: from the request's queue token
// when it has one (with s, the room's last state, if any), else looked up
// in Redis (with a state read there too).
func (g *Gateway) roomPlace(r *http.Request, v int64, user string, s *room.Snapshot) (*room.Snapshot, room.Place, error) {
	if tok := r.Header.Get(room.Header); tok != "" {
		p, err := g.queueTokens.Verify(v, user, tok)
		if err != nil {
			return nil, room.Place{}, errBadQueue
		}
		if s == nil {
			if s, err = g.rooms.state(r.Context(), v); err != nil {
				return nil, room.Place{}, err
			}
		}
		return s, p, nil
	}
	s, p, err := g.rooms.store.Find(r.Context(), v, user, g.now())
	if gone(err) {
		g.rooms.learn(v, nil).set(nil, err)
	}
	if err != nil {
		return nil, room.Place{}, err
	}
	g.rooms.learn(v, s)
	return s, p, nil
}

// joinQueue: POST /v1/vouchers/{id}/queue. A place in the room, the same
// one to a user who has one; a voucher with a proof-of-work gate asks for
// a solved challenge here (X-Flashsale-Proof), not at its claims.
func (g *Gateway) joinQueue(w http.ResponseWriter, r *http.Request) {
	user, v, ok := g.userAndID(w, r)
	if !ok {
		return
	}
	pr, err := g.claimProof(r, user, v)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	now := g.now()
	s, p, err := g.rooms.store.Join(r.Context(), v, user, pr, now)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	g.rooms.learn(v, s)
	g.answerQueue(w, "join", s.Answer(p, now), g.queueTokens.Sign(v, user, p))
}

// getQueue: GET /v1/vouchers/{id}/queue. Where the caller stands: from
// the room's last state and the caller's token, without Redis, when the
// request carries the token.
//
// A poll whose token names its user needs no bearer token (the queue
// token is a capability, like a session cookie): polls are the room's hot
// path, and a bearer token's verification was most of their cost.
func (g *Gateway) getQueue(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") == "" && r.Header.Get(room.Header) != "" {
		v, err := pathID(r) // pollsFirst answers these before the router; this is its fallback
		if err != nil {
			g.fail(w, r, err)
			return
		}
		g.pollByToken(w, r, v)
		return
	}
	user, v, ok := g.userAndID(w, r)
	if !ok {
		return
	}
	var s *room.Snapshot
	var err error
	if e := g.rooms.of(v); e != nil {
		if s, err = e.known(); err != nil {
			g.fail(w, r, err)
			return
		}
	}
	s, p, err := g.roomPlace(r, v, user, s)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	tok := r.Header.Get(room.Header)
	if tok == "" {
		tok = g.queueTokens.Sign(v, user, p)
	}
	g.answerQueue(w, "poll", s.Answer(p, g.now()), tok)
}

// pollsFirst answers polls that carry only their queue token before the
// router: they are the room's hot path (a million waiters polling), and
// matching the route pattern was a tenth of their cost. Everything else,
// and any poll that is not exactly GET /v1/vouchers/{id}/queue, goes to
// next.
func (g *Gateway) pollsFirst(next http.Handler) http.Handler {
	const prefix, suffix = "/v1/vouchers/", "/queue"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if r.Method == http.MethodGet && strings.HasPrefix(p, prefix) && strings.HasSuffix(p, suffix) &&
			len(p) > len(prefix)+len(suffix) && r.Header.Get("Authorization") == "" && r.Header.Get(room.Header) != "" {
			if v, err := parseID(p[len(prefix) : len(p)-len(suffix)]); err == nil {
				g.pollByToken(w, r, v)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// pollByToken answers a poll of voucher v's room that carries only its
// queue token.
func (g *Gateway) pollByToken(w http.ResponseWriter, r *http.Request, v int64) {
	tok := r.Header.Get(room.Header)
	user, p, err := g.queueTokens.Open(v, tok)
	if err != nil {
		g.fail(w, r, errBadQueue)
		return
	}
	now := g.now()
	if ok, wait := g.users.Allow(user, now); !ok {
		g.metrics.shed.WithLabelValues("user_rate").Inc()
		writeRateLimited(w, wait)
		return
	}
	s, err := g.rooms.state(r.Context(), v)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	g.answerQueue(w, "poll", s.Answer(p, now), tok)
}

// answerQueue writes a queue answer, by hand: polls are the room's hot
// path.
func (g *Gateway) answerQueue(w http.ResponseWriter, op string, a room.Answer, tok string) {
	g.metrics.roomAnswer(op, a.State)
	b := make([]byte, 0, 160)
	b = append(b, `{"state":"`...)
	b = append(b, a.State...)
	b = append(b, `","position":`...)
	b = strconv.AppendInt(b, a.Position, 10)
	b = append(b, `,"retry_after_ms":`...)
	b = strconv.AppendInt(b, a.Retry.Milliseconds(), 10)
	b = append(b, `,"queue_token":"`...)
	b = append(b, tok...)
	b = append(b, '"')
	if !a.Expires.IsZero() {
		b = append(b, `,"pass_expires_at":"`...)
		b = a.Expires.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	b = append(b, "}\n"...)
	h := w.Header()
	h["Content-Type"], h["Cache-Control"] = jsonContentType, noStore // shared, never changed: no allocation per poll
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}
