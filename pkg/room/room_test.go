package room_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/room"
)

// The pre-queue's places are a permutation of 1..n for every n, another
// one for another seed, and not the arrival order.
func TestShuffleIsAPermutation(t *testing.T) {
	for _, v := range []int{room.ShuffleV1, room.ShuffleV2} {
		for _, n := range []int64{1, 2, 3, 7, 64, 1000, 4097} {
			seen := make([]bool, n+1)
			for k := int64(1); k <= n; k++ {
				p := room.Shuffle(42, v, n, k)
				require.True(t, p >= 1 && p <= n, "place %d of %d", p, n)
				require.False(t, seen[p], "place %d given twice (n=%d, version %d)", p, n, v)
				seen[p] = true
			}
		}
	}
	order := func(seed uint64) []int64 {
		out := make([]int64, 1000)
		for k := range out {
			out[k] = room.Shuffle(seed, room.ShuffleV2, 1000, int64(k+1))
		}
		return out
	}
	a, b := order(1), order(2)
	require.NotEqual(t, a, b, "another seed, another order")
	fixed := 0
	for k, p := range a {
		if p == int64(k+1) {
			fixed++
		}
	}
	require.Less(t, fixed, 10, "a random permutation of 1000 fixes about one place, not %d", fixed)
	// Early joiners do not keep an edge: the first tenth's places spread
	// over the whole queue (mean near the middle).
	var sum int64
	for _, p := range a[:100] {
		sum += p
	}
	require.InDelta(t, 500, float64(sum)/100, 120, "the first 100 joins' mean place")
	require.False(t, slices.IsSorted(a))
}

// A token names one user's place in one room: another user, voucher,
// place or key does not verify.
func TestQueueTokens(t *testing.T) {
	k := room.NewTokens([]byte("0123456789abcdef0123456789abcdef"))
	p := room.Place{Pre: true, N: 17}
	tok := k.Sign(5, "alice", p)
	got, err := k.Verify(5, "alice", tok)
	require.NoError(t, err)
	require.Equal(t, p, got)
	for _, bad := range []struct {
		v    int64
		user string
		tok  string
	}{
		{6, "alice", tok}, {5, "bob", tok}, {5, "alice", "p18" + tok[3:]}, {5, "alice", "17" + tok[3:]},
		{5, "alice", ""}, {5, "alice", "p17"}, {5, "alice", "p17.!!"},
	} {
		_, err := k.Verify(bad.v, bad.user, bad.tok)
		require.ErrorIs(t, err, room.ErrBadToken, "%+v", bad)
	}
	_, err = room.NewTokens([]byte("another key, another gateway set")).Verify(5, "alice", tok)
	require.ErrorIs(t, err, room.ErrBadToken)
	// A token names its user: a poll needs nothing else.
	user, got, err := k.Open(5, tok)
	require.NoError(t, err)
	require.Equal(t, "alice", user)
	require.Equal(t, p, got)
	bob := k.Sign(5, "bob", p)
	place, _, _ := strings.Cut(tok, ".")
	_, mac, _ := strings.Cut(tok[len(place)+1:], ".")
	_, _, err = k.Open(5, place+"."+strings.Split(bob, ".")[1]+"."+mac)
	require.ErrorIs(t, err, room.ErrBadToken, "alice's MAC under bob's name")
	_, _, err = k.Open(5, strings.Repeat("x", room.MaxTokenLen+1))
	require.ErrorIs(t, err, room.ErrBadToken)
}

// The answers from a room's state: placed or not, admitted, lapsed, sold
// out, closed, paused; people far back poll less often, unless the stock
// could run out before their turn.
func TestAnswers(t *testing.T) {
	t0 := time.Now()
	s := &room.Snapshot{Front: 10, Tail: 1000, Pre: 0, Frozen: true, Stock: 1000, Live: 10, Rate: 10, Limit: 1,
		Segments: []room.Segment{{Upto: 4, Expires: t0.Add(-time.Second)}, {Upto: 10, Expires: t0.Add(time.Minute)}},
		StartsAt: t0.Add(-time.Hour), EndsAt: t0.Add(time.Hour)}
	require.Equal(t, room.Lapsed, s.Answer(room.Place{N: 3}, t0).State)
	a := s.Answer(room.Place{N: 5}, t0)
	require.Equal(t, room.Admitted, a.State)
	require.Equal(t, t0.Add(time.Minute), a.Expires)
	require.Equal(t, room.AdmittedRetry, a.Retry, "a minute's pass: asks again within 2 s, to hear a pause")
	near, far := s.Answer(room.Place{N: 11}, t0), s.Answer(room.Place{N: 900}, t0)
	require.Equal(t, room.Answer{State: room.Waiting, Position: 1, Ticket: 11, Retry: room.RetryMin, ETA: -1}, near, "nothing observed: no estimate")
	require.Equal(t, int64(890), far.Position)
	require.Equal(t, room.RetryMax, far.Retry, "89 s from their turn: asks again in the longest interval")
	// 15 units left and 10 passes out: the stock may be gone in half a
	// second, so everyone asks again soon.
	s.Stock = 15
	require.Equal(t, room.RetryMin, s.Answer(room.Place{N: 900}, t0).Retry)
	s.Stock = 0
	require.Equal(t, room.SoldOut, s.Answer(room.Place{N: 900}, t0).State)
	require.Equal(t, room.Closed, s.Answer(room.Place{N: 900}, t0.Add(time.Hour)).State)
	s.Paused = true
	require.Equal(t, room.Paused, s.Answer(room.Place{N: 900}, t0).State)
	pre := &room.Snapshot{Pre: 3, StartsAt: t0.Add(2 * time.Second), Rate: 1}
	w := pre.Answer(room.Place{Pre: true, N: 2}, t0)
	require.Equal(t, room.Answer{State: room.Waiting, Retry: 2 * time.Second, ETA: -1}, w, "placed at the start")
}

func TestConfig(t *testing.T) {
	c := room.Config{AdmitPerSecond: 50, PrequeueSeconds: 30}
	require.NoError(t, c.Validate())
	require.EqualValues(t, room.DefaultPassSeconds, c.PassSeconds)
	back, err := room.Decode(c.Encode())
	require.NoError(t, err)
	require.Equal(t, c, *back)
	for _, bad := range []room.Config{{}, {AdmitPerSecond: 1, PrequeueSeconds: -1}, {AdmitPerSecond: 1, PassSeconds: -5},
		{AdmitPerSecond: room.MaxAdmitPerSecond + 1}} {
		require.Error(t, bad.Validate(), "%+v", bad)
	}
	none, err := room.Decode("0")
	require.NoError(t, err)
	require.Nil(t, none)
}

// The wait estimate is the position over the rate the room really
// admitted lately, as the states a gateway saw tell it, not the
// configured rate: unknown before a second of states, and while nobody is
// admitted.
func TestTheEstimateFollowsTheObservedRate(t *testing.T) {
	t0 := time.Now()
	c := room.NewCache(nil, func() time.Time { return t0 })
	state := func(after time.Duration, front int64) *room.Snapshot {
		s := &room.Snapshot{At: t0.Add(after), Front: front, Tail: 1000, Frozen: true, Stock: 1000, Rate: 50, Limit: 1,
			StartsAt: t0.Add(-time.Hour)}
		c.Learn(1, s)
		return s
	}
	eta := func(s *room.Snapshot, ticket int64) time.Duration { return s.Answer(room.Place{N: ticket}, s.At).ETA }
	require.Equal(t, time.Duration(-1), eta(state(0, 0), 100), "nothing seen yet")
	require.Equal(t, time.Duration(-1), eta(state(500*time.Millisecond, 2), 100), "half a second seen")
	s := state(2*time.Second, 10) // 5 a second, not the configured 50
	require.InDelta(t, 5.0, s.Admitting, 1e-9)
	require.Equal(t, 18*time.Second, eta(s, 100), "90 places ahead at 5 a second")
	require.Equal(t, time.Duration(-1), s.Answer(room.Place{N: 5}, s.At).ETA, "admitted: no estimate")
	// Nobody admitted for the whole window: the room does not know.
	require.Equal(t, time.Duration(-1), eta(state(8*time.Second, 10), 100))
	s = state(9*time.Second, 10)
	require.Zero(t, s.Admitting)
	require.Equal(t, time.Duration(-1), eta(s, 100))

	// Before the start nothing is counted, and the start's admissions (a
	// second's worth at once) are where the rate is counted from.
	start := t0.Add(time.Minute)
	at := func(after time.Duration, front int64) *room.Snapshot {
		s := &room.Snapshot{At: start.Add(after), Front: front, Tail: 1000, Frozen: after >= 0, Stock: 1000, Rate: 50, Limit: 1,
			StartsAt: start}
		c.Learn(2, s)
		return s
	}
	at(-3*time.Second, 0)
	require.Equal(t, time.Duration(-1), eta(at(0, 50), 100), "the start's burst is no rate")
	s = at(time.Second, 70)
	require.InDelta(t, 20.0, s.Admitting, 1e-9, "20 in the second after the start, not 70 over four")
}

// Ids found without a room are remembered apart from rooms, at most
// MaxNoRoom of them, for NoRoomFor; past the bound a new id takes the
// place of the one remembered longest, in constant time however full
// (the old memory scanned the whole map under its lock for each new id
// once full, and then kept none); a room learnt of replaces its id's "no
// room" at once.
func TestTheNoRoomMemoryIsBounded(t *testing.T) {
	now := time.Now()
	c := room.NewCache(nil, func() time.Time { return now })
	for v := range int64(room.MaxNoRoom + 100) {
		c.NoRoom(v, room.ErrNoRoom)
	}
	require.Equal(t, room.MaxNoRoom, c.NoRooms(), "bounded")
	_, err := c.Known(99)
	require.NoError(t, err, "the first 100 gave their places to the last 100")
	_, err = c.Known(100)
	require.ErrorIs(t, err, room.ErrNoRoom)
	require.Nil(t, c.Of(100), "not a room: never ticked")
	_, err = c.Known(room.MaxNoRoom + 50)
	require.ErrorIs(t, err, room.ErrNoRoom, "past the bound: the new ones kept")

	s := &room.Snapshot{At: now, Tail: 1, Stock: 1, Rate: 1, Limit: 1, StartsAt: now}
	c.Learn(200, s)
	got, err := c.Known(200)
	require.NoError(t, err)
	require.Same(t, s, got, "a room learnt of replaces its no-room")

	c.NoRoom(101, rdb.ErrVoucherNotFound)
	_, err = c.Known(101)
	require.ErrorIs(t, err, rdb.ErrVoucherNotFound, "told again: the newer answer, in the same place")
	require.LessOrEqual(t, c.NoRooms(), room.MaxNoRoom)

	now = now.Add(room.NoRoomFor)
	_, err = c.Known(100)
	require.NoError(t, err, "asked again after NoRoomFor")
	for k := range int64(2 * room.MaxNoRoom) { // twice round: each new id one step, whatever the map holds
		c.NoRoom(1_000_000+k, room.ErrNoRoom)
	}
	require.Equal(t, room.MaxNoRoom, c.NoRooms())
	_, err = c.Known(1_000_000 + 2*room.MaxNoRoom - 1)
	require.ErrorIs(t, err, room.ErrNoRoom, "the newest kept")
}

// kendallTau is the rank correlation of the arrival order 1..n with the
// places a gave them: 1 - 2 × inversions / pairs, by merge sort.
func kendallTau(a []int64) float64 {
	n := float64(len(a))
	var inv int64
	var sortCount func(a, buf []int64)
	sortCount = func(a, buf []int64) {
		if len(a) < 2 {
			return
		}
		m := len(a) / 2
		sortCount(a[:m], buf[:m])
		sortCount(a[m:], buf[m:])
		copy(buf, a)
		i, j, k := 0, m, 0
		for i < m && j < len(a) {
			if buf[i] <= buf[j] {
				a[k], i = buf[i], i+1
			} else {
				a[k], j = buf[j], j+1
				inv += int64(m - i)
			}
			k++
		}
		for ; i < m; i, k = i+1, k+1 {
			a[k] = buf[i]
		}
		for ; j < len(a); j, k = j+1, k+1 {
			a[k] = buf[j]
		}
	}
	sortCount(a, make([]int64, len(a)))
	return 1 - 2*float64(inv)/(n*(n-1)/2)
}

// The pre-queue's shuffle against a random permutation: over many seeds,
// the Kendall tau of arrival and place has a random permutation's mean
// (0) and spread (sqrt(2(2n+5) / (9n(n-1)))), each within 4 standard
// errors, at every size, those just under a power of 4 among them (1,001,
// 1,024, 4,096, where the 4-round ShuffleV1's spread was 1.2 times a
// random one's: that version fails this test).
func TestTheShuffleIsIndistinguishableFromRandom(t *testing.T) {
	check := func(v int) []string {
		var bad []string
		for _, n := range []int64{10, 100, 1001, 1024, 4096, 20000} {
			seeds := 400
			if n == 20000 {
				seeds = 100
			}
			var sum, sq float64
			places := make([]int64, n)
			for s := range seeds {
				seed := uint64(s)*0x9e3779b97f4a7c15 + 0x632be59bd9b4e019
				for k := int64(1); k <= n; k++ {
					places[k-1] = room.Shuffle(seed, v, n, k)
				}
				tau := kendallTau(places)
				sum, sq = sum+tau, sq+tau*tau
			}
			S, nf := float64(seeds), float64(n)
			mean := sum / S
			sd := math.Sqrt(sq/S - mean*mean)
			sigma := math.Sqrt(2 * (2*nf + 5) / (9 * nf * (nf - 1)))
			if z := mean / (sigma / math.Sqrt(S)); math.Abs(z) > 4 {
				bad = append(bad, fmt.Sprintf("n %d: mean tau %.4f, %.1f standard errors from 0", n, mean, z))
			}
			if z := (sd/sigma - 1) * math.Sqrt(2*S); math.Abs(z) > 4 {
				bad = append(bad, fmt.Sprintf("n %d: tau's spread %.4f, %.2f times a random permutation's %.4f (%.1f standard errors)", n, sd, sd/sigma, sigma, z))
			}
		}
		return bad
	}
	require.Empty(t, check(room.ShuffleV2))
	require.NotEmpty(t, check(room.ShuffleV1), "the test tells the old shuffle from a random permutation")
}

// A room seeded by a gateway before ShuffleV2 (16 hex digits) keeps its
// places: its seed reads as version 1, and its places are the 4-round
// shuffle's; a new room's seed names version 2.
func TestARoomSeededBeforeKeepsItsPlaces(t *testing.T) {
	seed, v, err := room.ParseSeed("00000000000000ff")
	require.NoError(t, err)
	require.Equal(t, uint64(255), seed)
	require.Equal(t, room.ShuffleV1, v)
	old := &room.Snapshot{Frozen: true, Pre: 1024, Seed: seed, ShuffleVersion: v}
	// The places the first eight joins of such a room of 1,024 were
	// given by a gateway before ShuffleV2 (its room.Shuffle(255, 1024, k)).
	before := []int64{19, 691, 213, 781, 279, 521, 398, 329}
	for k, want := range before {
		got, err := old.Ticket(room.Place{Pre: true, N: int64(k + 1)})
		require.NoError(t, err)
		require.Equal(t, want, got, "join %d", k+1)
	}
	differ := 0
	for k := int64(1); k <= 1024; k++ {
		if room.Shuffle(seed, room.ShuffleV2, 1024, k) != room.Shuffle(seed, room.ShuffleV1, 1024, k) {
			differ++
		}
	}
	require.Greater(t, differ, 900, "the versions are different shuffles")
	var b [8]byte
	b[7] = 255
	s := room.NewSeed(b)
	seed, v, err = room.ParseSeed(s)
	require.NoError(t, err)
	require.Equal(t, room.ShuffleV2, v, "a new room's seed (%s) names version 2", s)
	require.Equal(t, uint64(255), seed)
	for _, bad := range []string{"", "xyz", "2-", "2-00ff", "3-00000000000000ff"} {
		_, _, err := room.ParseSeed(bad)
		require.Error(t, err, bad)
	}
}

// The window of places another gateway may have admitted since a state
// was read: none beyond the front of a stalled room (paused, or its
// passes at their cap) for StallTrusted after the tick that found it so,
// then the room's rate again.
func TestAStalledRoomAdmitsNobodyWithinItsTrust(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_000)
	s := &room.Snapshot{At: at, Front: 10, Tail: 500, Frozen: true, Rate: 100, StartsAt: at.Add(-time.Minute)}
	require.False(t, s.MayBeAdmittedBy(10, nil, at), "admitted in the state")
	require.True(t, s.MayBeAdmittedBy(11, nil, at), "a moving room: the next second's places may be")
	require.True(t, s.MayBeAdmittedBy(111, nil, at))
	require.False(t, s.MayBeAdmittedBy(10+100+2, nil, at), "beyond a second's credit")
	s.StalledAt = at
	require.False(t, s.MayBeAdmittedBy(11, nil, at), "stalled: nobody")
	require.False(t, s.MayBeAdmittedBy(11, nil, at.Add(room.StallTrusted-time.Millisecond)))
	require.True(t, s.MayBeAdmittedBy(11, nil, at.Add(room.StallTrusted)), "past its trust: ask")
	require.Less(t, room.StallTrusted, room.OpenDelay, "a stall is trusted for less than a stalled room waits to admit")
}
