package bench

// The waiting room's rows: Redis memory per waiter with a million of
// them, a poll's CPU in the gateway (next to a bare handler's, same run)
// and in Redis, and a sale behind a room with the real binaries: how
// soon every waiter hears sold_out, and the fairness figures.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/lua"
	"github.com/flashsale/flashsale/pkg/internal/harness"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/room"
)

// RoomRun is the waiting room's figures.
type RoomRun struct {
	// A million waiters joined one room (the script, pipelined).
	Waiters int64 `json:"waiters"`
	// HashBytesPerWaiter: MEMORY USAGE of the waiters' hash over them;
	// UsedBytesPerWaiter: Redis's used_memory grown over them.
	HashBytesPerWaiter float64 `json:"hash_bytes_per_waiter"`
	UsedBytesPerWaiter float64 `json:"used_memory_bytes_per_waiter"`
	JoinRedisUs        float64 `json:"join_redis_us"`
	Conns              int     `json:"conns"`
	// Polls with the queue token, closed loop, next to the bare handler.
	Poll CPUMeasure `json:"poll"`
	Bare CPUMeasure `json:"bare"`
	// The sale: RunRoom's report lines.
	Sale *RoomSale `json:"sale,omitempty"`
}

// RoomSale is a room sale's figures (harness.RoomReport's).
type RoomSale struct {
	Users, Fast, Stock    int
	Waiters               int64
	SoldOutP50ms          int64
	SoldOutP99ms          int64
	SoldOutMaxms          int64
	Tau, Inversions       float64
	FastShare, FastNoRoom float64
	// ETA: in a slower room, the first wait estimate each admitted person
	// was told against the wait that followed (harness.ETAError), in ms.
	ETAs                                   int
	ETAAbsP50ms, ETAAbsP90ms, ETABiasP50ms int64
	ETARelP50                              float64
	ETAWaitP50ms                           int64
	Violations                             []string
}

// roomRuns measures the room's rows on s (the bare handler at trivialAddr).
func roomRuns(ctx context.Context, s *harness.Stack, cfg Config, tokens []string, host, trivialAddr string, trivialPid int, rep *Report) error {
	rc, _ := s.RDB.Client().(*redis.Client)
	if rc == nil {
		return fmt.Errorf("the room's rows need a single redis-server")
	}
	rr := &RoomRun{}
	rep.Room = rr
	conns := cfg.Conns[0]
	rr.Conns = conns

	// Polls: waiters join through the gateway, then poll with their tokens.
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "room polls", Stock: 10_000_000, PerUserLimit: 1,
		WaitingRoom: &room.Config{AdmitPerSecond: 1000, PassSeconds: 3600}})
	if err != nil {
		return err
	}
	queue := "/v1/vouchers/" + strconv.FormatInt(v, 10) + "/queue"
	const pollers = 20_000
	qtok := make([]string, pollers)
	Drive(Load{Addr: host, Conns: conns, MaxRequests: pollers, Duration: time.Minute,
		Next: func(i int64) []byte { return Request(host, queue, tokens[i]) },
		OnResponse: func(i int64, status int, body []byte) {
			var a struct {
				Token string `json:"queue_token"`
			}
			if status == 200 && json.Unmarshal(body, &a) == nil && i < pollers {
				qtok[i] = a.Token
			}
		}})
	polls := make([][]byte, pollers)
	for i := range polls {
		if qtok[i] == "" {
			return fmt.Errorf("waiter %d did not join", i)
		}
		// The token alone, as a client polls (docs/API.md): it names its user.
		polls[i] = []byte("GET " + queue + " HTTP/1.1\r\nHost: " + host + "\r\n" + room.Header + ": " + qtok[i] + "\r\n\r\n")
	}
	bareReq := Request(trivialAddr, "/", "x")
	for round := range 2 { // alternated: the machine's noise falls on both
		bare, err := cpuOf(ctx, "bare net/http handler", trivialPid, nil, func() *Result {
			return Drive(Load{Addr: trivialAddr, Conns: conns, Duration: cfg.Duration, Next: func(int64) []byte { return bareReq }})
		})
		if err != nil {
			return err
		}
		poll, err := cpuOf(ctx, "waiting-room polls, with the queue token", s.Gateway.Pid(), rc, func() *Result {
			return Drive(Load{Addr: host, Conns: conns, Duration: cfg.Duration, Next: func(i int64) []byte { return polls[i%pollers] }})
		})
		if err != nil {
			return err
		}
		cfg.logf("room polls: gateway %.1f µs/poll vs bare %.1f µs, redis %.2f µs/poll, %.0f polls/s, status %v",
			poll.ProcessUs, bare.ProcessUs, poll.RedisUs, poll.PerSecond, poll.Status)
		if round == 0 {
			rr.Poll, rr.Bare = poll, bare
			continue
		}
		rr.Poll.ProcessUs, rr.Bare.ProcessUs = (rr.Poll.ProcessUs+poll.ProcessUs)/2, (rr.Bare.ProcessUs+bare.ProcessUs)/2
		rr.Poll.RedisUs = (rr.Poll.RedisUs + poll.RedisUs) / 2
		rr.Poll.Requests += poll.Requests
	}
	rr.Poll.VsBare = rr.Poll.ProcessUs / rr.Bare.ProcessUs

	// A million waiters: joined with the room's script, pipelined, as many
	// gateways would.
	if err := millionWaiters(ctx, s, rc, cfg, rr); err != nil {
		return err
	}

	// A sale behind a room, with workers: sold_out heard by every waiter,
	// and the fairness figures, room on and off.
	for i := range 2 {
		if _, err := s.StartWorker(i); err != nil {
			return err
		}
	}
	rcfg := harness.RoomConfig{Stock: 500, Users: 20000, Fast: 50, AdmitPerSecond: 100, Prequeue: 5 * time.Second,
		Pass: 10 * time.Second, Arrivals: 3 * time.Second, NoShow: 0.1, Conns: 256, Seed: uint64(time.Now().UnixNano())}
	on, err := s.RunRoom(ctx, rcfg)
	if err != nil {
		return err
	}
	rcfg.NoRoom = true
	off, err := s.RunRoom(ctx, rcfg)
	if err != nil {
		return err
	}
	// The wait estimate, where waits are long: a slower room, and a crowd
	// arriving over seconds (in the sale above most people admitted were
	// admitted in its first second, before any estimate).
	slowCfg := harness.RoomConfig{Stock: 300, Users: 1500, Fast: 1, AdmitPerSecond: 20, Prequeue: 2 * time.Second,
		Pass: 10 * time.Second, Arrivals: 10 * time.Second, NoShow: 0.1, Conns: 64, Seed: rcfg.Seed}
	slow, err := s.RunRoom(ctx, slowCfg)
	if err != nil {
		return err
	}
	rr.Sale = &RoomSale{Users: rcfg.Users, Fast: rcfg.Fast, Stock: int(rcfg.Stock), Waiters: on.Waiters,
		SoldOutP50ms: on.SoldOut.ValueAtQuantile(50), SoldOutP99ms: on.SoldOut.ValueAtQuantile(99), SoldOutMaxms: on.SoldOut.Max(),
		Tau: on.Tau, Inversions: on.Inversions, FastShare: on.FastShare, FastNoRoom: off.FastShare,
		ETAs: slow.ETA.N, ETAAbsP50ms: slow.ETA.AbsP50.Milliseconds(), ETAAbsP90ms: slow.ETA.AbsP90.Milliseconds(),
		ETABiasP50ms: slow.ETA.BiasP50.Milliseconds(), ETARelP50: slow.ETA.RelP50, ETAWaitP50ms: slow.ETA.WaitP50.Milliseconds(),
		Violations: append(append(on.Violations(), off.Violations()...), slow.Violations()...)}
	cfg.logf("room sale: sold_out p99 %d ms over %d waiters; fast clients %.2f %% with the room, %.2f %% without",
		rr.Sale.SoldOutP99ms, rr.Sale.Waiters, 100*rr.Sale.FastShare, 100*rr.Sale.FastNoRoom)
	return nil
}

// millionWaiters joins cfg.RoomWaiters users to one room and measures
// the memory and the Redis CPU they cost.
func millionWaiters(ctx context.Context, s *harness.Stack, rc *redis.Client, cfg Config, rr *RoomRun) error {
	n := int64(cfg.RoomWaiters)
	v, err := s.CreateVoucher(ctx, harness.VoucherSpec{Name: "a million waiters", Stock: 1000, PerUserLimit: 1,
		WaitingRoom: &room.Config{AdmitPerSecond: 1, PassSeconds: 60}})
	if err != nil {
		return err
	}
	rs := room.NewStore(s.RDB, 0)
	state, waiters := rs.Keys(v)
	if _, err := rs.Tick(ctx, v, time.Now()); err != nil { // the state, before the memory is read
		return err
	}
	used0, err := usedMemory(ctx, rc)
	if err != nil {
		return err
	}
	cpu0, err := redisCPU(ctx, rc)
	if err != nil {
		return err
	}
	vkey := s.RDB.VoucherKey(v)
	keys := []string{vkey, state, waiters, rdb.ProofKey(vkey, "")}
	const batch = 1000
	workers := 4
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for from := int64(w) * batch; from < n; from += int64(workers) * batch {
				pipe := rc.Pipeline()
				now := time.Now().UnixMilli()
				for i := from; i < min(from+batch, n); i++ {
					lua.Room.EvalSha(ctx, pipe, keys, now, "join", "w"+strconv.FormatInt(i, 10), "0000000000000000", 0, 0, room.PassFactor,
						n+1, int64(room.IdleTTL/time.Second), 0)
				}
				if _, err := pipe.Exec(ctx); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			return err
		}
	}
	cpu1, err := redisCPU(ctx, rc)
	if err != nil {
		return err
	}
	used1, err := usedMemory(ctx, rc)
	if err != nil {
		return err
	}
	have, bytes, err := rs.Waiters(ctx, v)
	if err != nil {
		return err
	}
	if have != n {
		return fmt.Errorf("%d waiters joined, %d wanted", have, n)
	}
	rr.Waiters = n
	rr.HashBytesPerWaiter = float64(bytes) / float64(n)
	rr.UsedBytesPerWaiter = float64(used1-used0) / float64(n)
	rr.JoinRedisUs = float64((cpu1 - cpu0).Microseconds()) / float64(n)
	cfg.logf("%d waiters: %.1f bytes each in their hash, %.1f of used_memory; a join %.1f µs of Redis",
		n, rr.HashBytesPerWaiter, rr.UsedBytesPerWaiter, rr.JoinRedisUs)
	return rc.Del(ctx, waiters, state).Err()
}

func usedMemory(ctx context.Context, c *redis.Client) (int64, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no used_memory in INFO memory")
}

func (r *Report) printRoom(w io.Writer) {
	if r.Room == nil {
		return
	}
	m := r.Room
	fmt.Fprintf(w, "\nwaiting room: %d waiters in one room: %.1f bytes each in Redis (their hash; used_memory grew %.1f) (target ≤ 100); a join %.1f µs of Redis\n",
		m.Waiters, m.HashBytesPerWaiter, m.UsedBytesPerWaiter, m.JoinRedisUs)
	fmt.Fprintf(w, "polls with the queue token, %d conns: gateway %.1f µs/poll vs bare handler %.1f µs (%.2f ×, target ≤ 1.3 ×), redis %.2f µs/poll (target ≤ 2), %.0f polls/s\n",
		m.Conns, m.Poll.ProcessUs, m.Bare.ProcessUs, m.Poll.VsBare, m.Poll.RedisUs, m.Poll.PerSecond)
	if s := m.Sale; s != nil {
		fmt.Fprintf(w, "room sale, %d users (%d fast) for %d units: sold_out heard %d / %d / %d ms (p50 / p99 / max, target p99 ≤ 1000) after the last unit by %d waiters\n",
			s.Users, s.Fast, s.Stock, s.SoldOutP50ms, s.SoldOutP99ms, s.SoldOutMaxms, s.Waiters)
		fmt.Fprintf(w, "  admission vs queue order: tau-b %.4f, pairs out of order %.4f %%; fast clients won %.2f %% of the stock (%.2f %% without a room)\n",
			s.Tau, 100*s.Inversions, 100*s.FastShare, 100*s.FastNoRoom)
		if s.ETAs > 0 {
			fmt.Fprintf(w, "  eta_ms in a slower room (1500 people, 300 units, 20 admitted/s): the first estimate vs the wait until the room admitted them: error p50 %d ms (%.0f %% of the wait), p90 %d ms, bias p50 %+d ms; median wait %d ms (%d admitted)\n",
				s.ETAAbsP50ms, 100*s.ETARelP50, s.ETAAbsP90ms, s.ETABiasP50ms, s.ETAWaitP50ms, s.ETAs)
		}
		if len(s.Violations) > 0 {
			fmt.Fprintf(w, "  invariants VIOLATED: %s\n", strings.Join(s.Violations, "; "))
		} else {
			fmt.Fprintln(w, "  invariants: all hold")
		}
	}
}
