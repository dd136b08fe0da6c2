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
	"time"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/room"
)

var (
	errNotAdmitted = httpapi.NewError(http.StatusForbidden, "not_admitted",
		"this voucher has a waiting room: join it (POST /v1/vouchers/{id}/queue) and claim once admitted, with its token in "+room.Header)
	errNotInQueue  = httpapi.NewError(http.StatusNotFound, "not_in_queue", "you have not joined this voucher's waiting room")
	errNoRoom      = httpapi.NewError(http.StatusNotFound, "no_waiting_room", "this voucher has no waiting room: claim it directly")
	errQueueClosed = httpapi.NewError(http.StatusConflict, "ended", "the sale has ended")
	errQueueEarly  = httpapi.NewError(http.StatusConflict, "not_started", "the waiting room opens prequeue_seconds before the sale starts")
	errQueueFull   = httpapi.NewError(http.StatusConflict, "queue_full", "the waiting room holds as many people as it takes (FLASHSALE_ROOM_MAX_WAITERS): it admits none more")
	errBadQueue    = httpapi.NewError(http.StatusForbidden, "not_admitted", "the queue token in "+room.Header+" is not one for you and this voucher: join again without it")
)

// roomTick is how often a gateway refreshes each room it serves (the
// room's clock runs in Redis; this is how stale a poll's answer may be),
// and roomIdle how long a room nobody asked this gateway about stays.
const (
	roomTick = 100 * time.Millisecond
	roomIdle = 30 * time.Second
)

// roomIndexEvery is how often a gateway reads the rooms' index
// (rdb.RoomsKey): how long a room put on a voucher may go unseen by a
// poll that holds no queue token for it, and by the queue page.
const roomIndexEvery = time.Second

// readRoomIndex reads the rooms' index for the polls and the page to
// answer from; when it cannot be read, they ask Redis until it can.
func (g *Gateway) readRoomIndex() {
	ctx, cancel := context.WithTimeout(context.Background(), roomIndexEvery)
	defer cancel()
	if err := g.rooms.ReadIndex(ctx); err != nil {
		g.log.Warn("could not read the rooms' index: polls ask redis", zap.Error(err))
	}
}

// tickRooms refreshes every room asked about lately, forgets the others,
// and publishes their figures; it returns by ctx's end, leaving a slow
// room's tick to finish on its own.
func (g *Gateway) tickRooms(ctx context.Context) {
	g.rooms.Tick(ctx, roomIdle, func(v int64, s *room.Snapshot, err error) {
		switch {
		case room.Gone(err):
			g.metrics.forgetRoom(v)
		case err != nil:
			g.log.Warn("waiting room tick failed", zap.Int64("voucher_id", v), zap.Error(err))
		default:
			g.metrics.roomFigures(v, s)
		}
	}, g.metrics.forgetRoom)
}

// roomPass is the pass of user's claim on voucher v as the script takes
// it, or errNotAdmitted; "" when v has no room as this gateway knows (the
// admission script then decides). A room this gateway does not know is
// read now when the claim carries a queue token for v, which only a room
// gives: the claim then runs the script once, with its pass. Without a
// token, a room-less voucher's claim costs nothing here, and the script's
// answer says whether there is a room (admitClaim); a claim without one on
// a room this gateway knows is refused from memory: a claim's pass is its
// queue token's place, never looked up.
//
// A claim of a place the gateway's last state does not admit reads the
// room (a peek: nothing written) only when another gateway may have
// admitted it since (Snapshot.MayBeAdmittedBy: never in a stalled room,
// paused or its passes at their cap).
func (g *Gateway) roomPass(r *http.Request, v int64, user string, now time.Time) (string, error) {
	var s *room.Snapshot
	e := g.rooms.Of(v)
	tok := httpapi.HeaderValue(r, room.Header)
	if e != nil {
		var err error
		if s, err = e.Known(); err != nil { // no room (as of the last tick): the script decides
			return "", nil
		}
		if tok == "" {
			return "", errNotAdmitted
		}
	} else if tok == "" {
		return "", nil
	}
	s, p, err := g.roomPlace(r, v, user, s)
	switch {
	case room.Gone(err): // taken away, or none after all: the script decides
		return "", nil
	case e == nil && err != nil: // a room this gateway did not know: a token not for it, or a failed read, leaves it to the script
		return "", nil
	case errors.Is(err, room.ErrNotInQueue):
		return "", errNotAdmitted
	case err != nil:
		return "", err
	}
	t, err := s.Ticket(p)
	if s.MayBeAdmittedBy(t, err, now) {
		// Another gateway's fresher state may have told this buyer
		// "admitted": decide from Redis's, read now.
		if s, err = g.rooms.Fresh(r.Context(), v, now); room.Gone(err) {
			return "", nil // taken away: the script decides
		} else if err != nil {
			return "", err
		}
		if s == nil {
			return "", errNotAdmitted
		}
		t, err = s.Ticket(p)
	}
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
	if tok := httpapi.HeaderValue(r, room.Header); tok != "" {
		p, err := g.queueTokens.Verify(v, user, tok)
		if err != nil {
			return nil, room.Place{}, errBadQueue
		}
		if s == nil {
			if s, err = g.rooms.State(r.Context(), v); err != nil {
				return nil, room.Place{}, err
			}
		}
		return s, p, nil
	}
	s, p, err := g.rooms.Store().Find(r.Context(), v, user, g.now())
	if room.Gone(err) {
		g.rooms.NoRoom(v, err)
	}
	if err != nil {
		return nil, room.Place{}, err
	}
	g.rooms.Learn(v, s)
	return s, p, nil
}

// joinQueue: POST /v1/vouchers/{id}/queue. A place in the room, the same
// one to a user who has one; a voucher with a proof-of-work gate asks for
// a solved challenge here (X-Flashsale-Proof), not at its claims, and one
// with access codes asks for the user's code here and at the claim.
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
	s, p, err := g.rooms.Store().Join(r.Context(), v, user, pr, g.claimAccess(r, user, v), now)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	g.rooms.Learn(v, s)
	g.answerQueue(w, v, "join", s.Answer(p, now), g.queueTokens.Sign(v, user, p))
}

// getQueue: GET /v1/vouchers/{id}/queue. Where the caller stands: from
// the room's last state and the caller's token, without Redis, when the
// request carries the token.
//
// A poll whose token names its user needs no bearer token (the queue
// token is a capability, like a session cookie): polls are the room's hot
// path, and a bearer token's verification was most of their cost.
func (g *Gateway) getQueue(w http.ResponseWriter, r *http.Request) {
	if httpapi.HeaderValue(r, "Authorization") == "" && httpapi.HeaderValue(r, room.Header) != "" {
		v, err := httpapi.PathID(r) // pollsFirst answers these before the router; this is its fallback
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
	s, err := g.rooms.Known(v)
	if s == nil && err == nil && httpapi.HeaderValue(r, room.Header) == "" {
		// Nothing known of a room, and no token proving one: the index
		// answers an id without a room, or without a voucher; else the
		// room is read once for every asker.
		if err = g.rooms.Indexed(v); err == nil {
			s, err = g.rooms.State(r.Context(), v)
		}
	}
	if err != nil {
		g.fail(w, r, err)
		return
	}
	s, p, err := g.roomPlace(r, v, user, s)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	tok := httpapi.HeaderValue(r, room.Header)
	if tok == "" {
		tok = g.queueTokens.Sign(v, user, p)
	}
	g.answerQueue(w, v, "poll", s.Answer(p, g.now()), tok)
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
			len(p) > len(prefix)+len(suffix) && httpapi.HeaderValue(r, "Authorization") == "" && httpapi.HeaderValue(r, room.Header) != "" {
			if v, err := httpapi.ParseID(p[len(prefix) : len(p)-len(suffix)]); err == nil {
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
	tok := httpapi.HeaderValue(r, room.Header)
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
	s, err := g.rooms.State(r.Context(), v)
	if err != nil {
		g.fail(w, r, err)
		return
	}
	g.answerQueue(w, v, "poll", s.Answer(p, now), tok)
}

// answerQueue writes a queue answer of voucher v's room, by hand: polls
// are the room's hot path.
func (g *Gateway) answerQueue(w http.ResponseWriter, v int64, op string, a room.Answer, tok string) {
	g.metrics.roomAnswer(op, a.State)
	g.rooms.Told(v, a)
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
	if a.State == room.Waiting {
		b = append(b, `,"eta_ms":`...)
		if a.ETA < 0 {
			b = append(b, "null"...)
		} else {
			b = strconv.AppendInt(b, a.ETA.Milliseconds(), 10)
		}
	}
	if !a.Expires.IsZero() {
		b = append(b, `,"pass_expires_at":"`...)
		b = a.Expires.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	b = append(b, "}\n"...)
	h := w.Header()
	h["Content-Type"], h["Cache-Control"] = httpapi.JSONContentType, httpapi.NoStore // shared, never changed: no allocation per poll
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}
