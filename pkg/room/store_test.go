package room_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/testclock"
	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
	"github.com/flashsale/flashsale/pkg/room"
)

// cluster, with -redis-cluster, is the Redis Cluster of three masters the
// package's Redis tests run on (make test runs both), as pkg/rdb's do.
var cluster *testsrv.Cluster

func TestMain(m *testing.M) { testsrv.MainMaybeOnCluster(m, &cluster) }

func newStores(t *testing.T) (*rdb.Store, *room.Store) {
	s := testrdb.NewStore(t, cluster, 4)
	return s, room.NewStore(s, 0)
}

// sale is a voucher of units starting at start, an hour long, with a room.
func sale(t *testing.T, s *rdb.Store, id, stock int64, start time.Time, c room.Config) {
	t.Helper()
	require.NoError(t, c.Validate())
	require.NoError(t, s.PutVoucher(context.Background(), rdb.Voucher{ID: id, Stock: stock, PerUserLimit: 1,
		StartsAt: start, EndsAt: start.Add(time.Hour), ExpireAt: start.Add(2 * time.Hour), Room: c.Encode()}))
}

func claim(s *rdb.Store, v int64, user, pass string, now time.Time) error {
	_, err := testrdb.Admitter(s).Admit(context.Background(), admission.Claim{VoucherID: v, UserID: user, Now: now, Day: order.Day(now, time.UTC), Pass: pass})
	return err
}

// pass is the pass of the user at ticket t, as a gateway makes it.
func pass(snap *room.Snapshot, t int64) string {
	return strconv.FormatInt(t, 10) + ":" + strconv.FormatInt(snap.PassExpires(t).UnixMilli(), 10)
}

// The pre-queue: joins before the start are placed at random when it
// starts (a permutation of 1..n, not the arrival order), later joins
// behind them in arrival order; the room admits at its rate, in queue
// order; a pass buys once and lapses unused; claims without a pass that
// holds are refused.
func TestPrequeueRateOrderAndPasses(t *testing.T) {
	s, rs := newStores(t)
	ctx := context.Background()
	start := testclock.Start().Add(time.Hour) // the joins come before it
	sale(t, s, 1, 100, start, room.Config{AdmitPerSecond: 10, PrequeueSeconds: 60, PassSeconds: 5})

	_, _, err := rs.Join(ctx, 1, "early", rdb.Proof{}, rdb.NoAccessCode, start.Add(-61*time.Second))
	require.ErrorIs(t, err, room.ErrNotOpen)
	_, _, err = rs.Find(ctx, 1, "u1", start.Add(-time.Minute))
	require.ErrorIs(t, err, room.ErrNotInQueue)

	const n = 50
	places := make([]room.Place, n)
	for i := range places {
		snap, p, err := rs.Join(ctx, 1, "u"+strconv.Itoa(i), rdb.Proof{}, rdb.NoAccessCode, start.Add(-30*time.Second+time.Duration(i)*time.Millisecond))
		require.NoError(t, err)
		require.Equal(t, room.Place{Pre: true, N: int64(i + 1)}, p)
		require.Equal(t, room.Answer{State: room.Waiting, Retry: room.RetryMax, ETA: -1}, snap.Answer(p, snap.At), "no place before the start")
		places[i] = p
	}
	_, again, err := rs.Join(ctx, 1, "u7", rdb.Proof{}, rdb.NoAccessCode, start.Add(-time.Second))
	require.NoError(t, err)
	require.Equal(t, places[7], again, "one place per user")
	require.ErrorIs(t, claim(s, 1, "u0", "", start), rdb.ErrNotAdmitted, "no pass, no claim")

	// The start: the pre-queue is placed, one second's worth admitted.
	snap, err := rs.Tick(ctx, 1, start)
	require.NoError(t, err)
	require.True(t, snap.Frozen)
	tickets := make([]int64, n)
	for i, p := range places {
		tickets[i], err = snap.Ticket(p)
		require.NoError(t, err)
	}
	sorted := slices.Clone(tickets)
	slices.Sort(sorted)
	for i := range sorted {
		require.EqualValues(t, i+1, sorted[i], "the pre-queue's places are a permutation of 1..%d", n)
	}
	require.NotEqual(t, sorted, tickets, "and not the arrival order")
	_, late, err := rs.Join(ctx, 1, "late", rdb.Proof{}, rdb.NoAccessCode, start.Add(10*time.Millisecond))
	require.NoError(t, err)
	require.Equal(t, room.Place{N: n + 1}, late, "after the start: behind the pre-queue")

	require.EqualValues(t, 10, snap.Front)
	for i, tk := range tickets {
		a := snap.Answer(places[i], start)
		if tk <= 10 {
			require.Equal(t, room.Admitted, a.State)
			require.True(t, start.Add(5*time.Second).Equal(a.Expires))
		} else {
			require.Equal(t, room.Waiting, a.State)
			require.Equal(t, tk-10, a.Position)
		}
	}
	// The rate: five more in half a second, ten more in a second, whoever
	// asks for the ticks.
	snap, err = rs.Tick(ctx, 1, start.Add(500*time.Millisecond))
	require.NoError(t, err)
	require.EqualValues(t, 15, snap.Front)
	snap, err = rs.Tick(ctx, 1, start.Add(time.Second))
	require.NoError(t, err)
	require.EqualValues(t, 20, snap.Front)
	require.EqualValues(t, 20, snap.Live)

	// A pass buys once: the user at ticket 12 claims; the pass is then no
	// longer outstanding. Ticket 30 is not admitted yet.
	user := func(ticket int64) string { return "u" + strconv.Itoa(slices.Index(tickets, ticket)) }
	now := start.Add(time.Second)
	require.NoError(t, claim(s, 1, user(12), pass(snap, 12), now))
	require.ErrorIs(t, claim(s, 1, user(12), pass(snap, 12), now), rdb.ErrUserLimit)
	require.ErrorIs(t, claim(s, 1, user(30), "30:"+strconv.FormatInt(now.UnixMilli(), 10), now), rdb.ErrNotAdmitted,
		"a pass whose end has passed")
	snap, err = rs.Tick(ctx, 1, now)
	require.NoError(t, err)
	require.EqualValues(t, 19, snap.Live)

	// The room went on admitting, up to everyone (51). Unused passes
	// lapse: at start+5s the first segment's, places 1..15 (the admissions
	// of the first half second share the first's end; one was used).
	for sec := 2; sec <= 5; sec++ {
		snap, err = rs.Tick(ctx, 1, start.Add(time.Duration(sec)*time.Second))
		require.NoError(t, err)
	}
	require.EqualValues(t, 51, snap.Front)
	for i, tk := range tickets {
		if tk <= 15 {
			require.Equal(t, room.Lapsed, snap.Answer(places[i], start.Add(5*time.Second)).State)
		} else {
			require.Equal(t, room.Admitted, snap.Answer(places[i], start.Add(5*time.Second)).State)
		}
	}
	require.EqualValues(t, 51-15, snap.Live, "admitted, minus the lapsed, minus the one used")
	require.ErrorIs(t, claim(s, 1, user(3), pass(snap, 3), start.Add(5*time.Second)), rdb.ErrNotAdmitted)
}

// The room knows the stock: it never admits past what the stock can sell
// (times room.PassFactor), tells everyone sold_out once it is gone, and
// admits again when units come back.
func TestTheRoomKnowsTheStock(t *testing.T) {
	s, rs := newStores(t)
	ctx := context.Background()
	start := testclock.Start()
	sale(t, s, 2, 4, start, room.Config{AdmitPerSecond: 1000, PassSeconds: 60})
	// The test's own clock, a minute into the hour-long sale: time.Now()
	// is up to an hour past start, and its last seconds would end the sale
	// between two ticks.
	now := start.Add(time.Minute)
	const n = 30
	places := make([]room.Place, n)
	for i := range places {
		var err error
		_, places[i], err = rs.Join(ctx, 2, "w"+strconv.Itoa(i), rdb.Proof{}, rdb.NoAccessCode, now)
		require.NoError(t, err)
		require.Equal(t, room.Place{N: int64(i + 1)}, places[i], "after the start: arrival order")
	}
	snap, err := rs.Tick(ctx, 2, now.Add(time.Second))
	require.NoError(t, err)
	require.EqualValues(t, 6, snap.Front, "4 units x 1.5: six passes, not the thousand the rate allows")
	require.EqualValues(t, 6, snap.Live)
	now = now.Add(time.Second)
	for i := range 4 {
		require.NoError(t, claim(s, 2, "w"+strconv.Itoa(i), pass(snap, int64(i+1)), now))
	}
	require.ErrorIs(t, claim(s, 2, "w4", pass(snap, 5), now), rdb.ErrSoldOut)
	snap, err = rs.Tick(ctx, 2, now.Add(time.Second))
	require.NoError(t, err)
	require.EqualValues(t, 6, snap.Front, "nothing left: nobody more admitted")
	require.EqualValues(t, 2, snap.Live)
	require.Equal(t, now.Add(time.Second).UnixMilli(), snap.StalledAt.UnixMilli(), "stalled: its passes at their cap")
	// Each waiter is told so; a gateway's cache records it with the
	// room's next tick, for the sale's report.
	cache := room.NewCache(rs, func() time.Time { return now.Add(time.Second) })
	cache.Learn(2, snap)
	for i, p := range places {
		a := snap.Answer(p, snap.At)
		require.Equal(t, room.SoldOut, a.State, "waiter %d", i)
		cache.Told(2, a)
		cache.Told(2, a) // told twice, counted once
	}
	cache.Tick(ctx, time.Minute, func(int64, *room.Snapshot, error) {}, func(int64) {})
	story, err := rs.Story(ctx, 2, now.Add(time.Second))
	require.NoError(t, err)
	require.EqualValues(t, n-6, story.Waiting)
	require.EqualValues(t, n-6, story.ToldSoldOut, "the admitted told sold_out are not counted")
	require.NotNil(t, story.GoneBeforeTurn)
	require.Zero(t, *story.GoneBeforeTurn, "sold out, and everyone waiting heard it")
	// Two units come back (an operator's top-up here; a cancelled order's
	// release is the same to the room): 2 x 1.5 = 3 passes may be out, 2
	// are, so one more is admitted.
	applied, _, err := s.ApplyChange(ctx, rdb.Change{ID: 7, VoucherID: 2, AddStock: 2})
	require.NoError(t, err)
	require.True(t, applied)
	snap, err = rs.Tick(ctx, 2, now.Add(2*time.Second))
	require.NoError(t, err)
	require.EqualValues(t, 6, snap.Front, "a stalled room admits again room.OpenDelay after a tick finds it can")
	require.True(t, snap.StalledAt.IsZero())
	require.Equal(t, now.Add(2*time.Second+room.OpenDelay).UnixMilli(), snap.OpensAt.UnixMilli())
	snap, err = rs.Tick(ctx, 2, now.Add(2*time.Second+room.OpenDelay))
	require.NoError(t, err)
	require.EqualValues(t, 7, snap.Front)
	require.Equal(t, room.Admitted, snap.Answer(places[6], snap.At).State)
	require.Equal(t, room.Waiting, snap.Answer(places[7], snap.At).State)
	require.LessOrEqual(t, snap.Live, int64(float64(snap.Stock)*room.PassFactor))
	// On sale again: nobody is known gone. A place told closed (the bit
	// after its sold_out one) counts apart.
	_, late, err := rs.Join(ctx, 2, "late", rdb.Proof{}, rdb.NoAccessCode, now.Add(2*time.Second))
	require.NoError(t, err)
	_, err = rs.Tick(ctx, 2, now.Add(2*time.Second), room.Told{Ticket: late.N, Closed: true})
	require.NoError(t, err)
	story, err = rs.Story(ctx, 2, now.Add(2*time.Second))
	require.NoError(t, err)
	require.EqualValues(t, n-7, story.ToldSoldOut, "one more admitted")
	require.EqualValues(t, 1, story.ToldClosed)
	require.Nil(t, story.GoneBeforeTurn)
}

// A voucher without a room has none to tick or join, and its claims need
// no pass; a paused or ended sale admits nobody; one with a proof-of-work
// gate asks for it at the room's door, once per challenge.
func TestNoRoomPausedEndedAndTheGate(t *testing.T) {
	s, rs := newStores(t)
	ctx := context.Background()
	start := testclock.Start()
	require.NoError(t, s.PutVoucher(ctx, rdb.Voucher{ID: 3, Stock: 5, PerUserLimit: 1, StartsAt: start, EndsAt: start.Add(time.Hour),
		ExpireAt: start.Add(2 * time.Hour)}))
	now := start.Add(time.Minute) // within the sale whatever the hour's minute (time.Now() may be its last second)
	_, err := rs.Tick(ctx, 3, now)
	require.ErrorIs(t, err, room.ErrNoRoom)
	_, err = rs.Tick(ctx, 99, now)
	require.ErrorIs(t, err, rdb.ErrVoucherNotFound)
	// A Redis that lost its data lost the partition's loaded mark: a room
	// of a voucher missing there is an outage, not an unknown voucher.
	require.NoError(t, s.Client().Del(ctx, rdb.LoadedKey(s.PartitionOf(99))).Err())
	_, err = rs.Tick(ctx, 99, now)
	require.ErrorIs(t, err, rdb.ErrNotLoaded)
	require.NoError(t, s.MarkLoaded(ctx, s.PartitionOf(99)))
	require.NoError(t, claim(s, 3, "x", "", now))

	require.NoError(t, s.PutVoucher(ctx, rdb.Voucher{ID: 4, Stock: 5, PerUserLimit: 1, StartsAt: start, EndsAt: start.Add(time.Hour),
		ExpireAt: start.Add(2 * time.Hour), Paused: true, ProofOfWork: 100, Room: (&room.Config{AdmitPerSecond: 100, PassSeconds: 60}).Encode()}))
	_, _, err = rs.Join(ctx, 4, "y", rdb.Proof{}, rdb.NoAccessCode, now)
	require.ErrorIs(t, err, rdb.ErrProofRequired)
	_, _, err = rs.Join(ctx, 4, "y", rdb.Proof{ID: "sig1", Max: 50, TTL: time.Minute}, rdb.NoAccessCode, now)
	require.ErrorIs(t, err, rdb.ErrProofInvalid, "too easy")
	snap, p, err := rs.Join(ctx, 4, "y", rdb.Proof{ID: "sig1", Max: 100, TTL: time.Minute}, rdb.NoAccessCode, now)
	require.NoError(t, err)
	require.Equal(t, room.Paused, snap.Answer(p, now).State)
	_, _, err = rs.Join(ctx, 4, "z", rdb.Proof{ID: "sig1", Max: 100, TTL: time.Minute}, rdb.NoAccessCode, now)
	require.ErrorIs(t, err, rdb.ErrProofInvalid, "used before")
	snap, err = rs.Tick(ctx, 4, now.Add(time.Second))
	require.NoError(t, err)
	require.Zero(t, snap.Front, "paused: nobody admitted")
	_, _, err = rs.Join(ctx, 4, "late", rdb.Proof{ID: "sig2", Max: 100, TTL: time.Minute}, rdb.NoAccessCode, start.Add(time.Hour))
	require.ErrorIs(t, err, room.ErrEnded)
	require.Equal(t, room.Closed, snap.Answer(p, start.Add(time.Hour)).State)
}

// A claim's read of a room (Peek) runs no clock and writes nothing: the
// pre-queue is not closed, nobody is admitted, no key's TTL is touched;
// the next tick does all of it.
func TestAPeekWritesNothing(t *testing.T) {
	s, rs := newStores(t)
	ctx := context.Background()
	start := testclock.Start()
	sale(t, s, 5, 4, start, room.Config{AdmitPerSecond: 10, PassSeconds: 60, PrequeueSeconds: 60})
	_, p, err := rs.Join(ctx, 5, "ann", rdb.Proof{}, rdb.NoAccessCode, start.Add(-time.Second))
	require.NoError(t, err)
	state, waiters := rs.Keys(5)
	dump := func() []any {
		var out []any
		for _, k := range []string{state, waiters, s.VoucherKey(5)} {
			h, err := s.Client().HGetAll(ctx, k).Result()
			require.NoError(t, err)
			// When it expires, not its TTL: a TTL read a second later
			// reads a second less (it did, across a second's edge).
			at, err := s.Client().ExpireTime(ctx, k).Result()
			require.NoError(t, err)
			out = append(out, h, at)
		}
		return out
	}
	before := dump()
	snap, err := rs.Peek(ctx, 5, start.Add(2*time.Second))
	require.NoError(t, err)
	require.False(t, snap.Frozen, "the pre-queue closes at a tick, not a peek")
	require.Zero(t, snap.Front)
	require.Equal(t, before, dump(), "a peek writes nothing")
	snap, err = rs.Tick(ctx, 5, start.Add(2*time.Second))
	require.NoError(t, err)
	require.True(t, snap.Frozen)
	require.EqualValues(t, 1, snap.Front)
	tk, err := snap.Ticket(p)
	require.NoError(t, err)
	require.False(t, snap.PassExpires(tk).IsZero(), "admitted by the tick")
	peeked, err := rs.Peek(ctx, 5, start.Add(3*time.Second))
	require.NoError(t, err)
	require.Equal(t, snap.Front, peeked.Front, "a peek sees what the last tick wrote")
}
