package room

// A room's story, for the sale's report: who joined, was admitted, bought
// with their pass, let it lapse, was told sold out or closed, left before
// their turn or is still waiting, and how long the admitted waited, from
// what the room keeps (its state, the j: and a: series room.lua writes,
// the voucher's rx: marks of passes that bought, the bitmap of places told
// how the sale ended).

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Story is a room's account.
type Story struct {
	Joined    int64 `json:"joined"`    // places given (the pre-queue's included)
	Prequeued int64 `json:"prequeued"` // of them, joins of the pre-queue
	Admitted  int64 `json:"admitted"`  // places admitted
	Bought    int64 `json:"bought"`    // admitted places whose pass bought
	Lapsed    int64 `json:"lapsed"`    // admitted places whose pass ran out unused
	Waiting   int64 `json:"waiting"`   // places never admitted (yet): told sold_out, closed, gone, or still waiting
	// ToldSoldOut and ToldClosed: of the places never admitted, those
	// that polled after the stock ran out (or the sale closed) and were
	// told so.
	ToldSoldOut int64 `json:"told_sold_out"`
	ToldClosed  int64 `json:"told_closed"`
	// GoneBeforeTurn: once the sale is over (sold out or closed), the
	// places never admitted that never asked again to hear it: they left
	// the queue before their turn. Nil while the sale is on (a waiter who
	// stopped asking cannot be told from one who asks rarely yet).
	GoneBeforeTurn *int64 `json:"gone_before_turn"`
	// TimeInQueue: from the join (the start, for the pre-queue) until the
	// room admitted the place, over the admitted places, to the second;
	// nil when none was admitted.
	TimeInQueue *QueueTimes `json:"time_in_queue_seconds"`
}

// QueueTimes are percentiles of the time in the queue, in seconds.
type QueueTimes struct {
	P50 int64 `json:"p50"`
	P99 int64 `json:"p99"`
	Max int64 `json:"max"`
}

// Story reads voucher v's room's story at now; nil when it never had a
// room.
func (s *Store) Story(ctx context.Context, v int64, now time.Time) (*Story, error) {
	rec, err := s.readRecord(ctx, v)
	if err != nil || len(rec.State) == 0 {
		return nil, err
	}
	return story(rec, now.UnixMilli()), nil
}

// told reports whether bit b of a room's told bitmap is set (Redis
// numbers a bitmap's bits from each byte's most significant).
func told(bits []byte, b int64) bool {
	return b/8 < int64(len(bits)) && bits[b/8]&(0x80>>(b%8)) != 0
}

// story computes a Story from what a room keeps, at nowMs.
func story(rec *record, nowMs int64) *Story {
	state, startMs, bought := rec.State, rec.StartMs, rec.Bought
	num := func(k string) int64 { n, _ := strconv.ParseInt(state[k], 10, 64); return n }
	pre, tail, front, gone := num("pre"), num("tail"), num("front"), num("gone")
	st := &Story{Prequeued: pre, Joined: pre, Admitted: front}
	frozen := num("frozen") == 1
	if frozen {
		st.Joined = tail
	}
	st.Waiting = st.Joined - front
	boughtGone := int64(0) // places of the lapsed segments that bought
	for _, p := range bought {
		if p <= front {
			st.Bought++
		}
		if p <= gone {
			boughtGone++
		}
	}
	st.Lapsed = max(gone-boughtGone, 0)
	if frozen { // placed: the pre-queue's tickets are known
		for t := front + 1; t <= tail; t++ {
			switch {
			case told(rec.Told, 2*t):
				st.ToldSoldOut++
			case told(rec.Told, 2*t+1):
				st.ToldClosed++
			}
		}
	}
	if rec.Stock <= 0 || (rec.EndMs > 0 && nowMs >= rec.EndMs) {
		g := st.Waiting - st.ToldSoldOut - st.ToldClosed
		st.GoneBeforeTurn = &g
	}
	st.TimeInQueue = queueTimes(series(state, "j:"), series(state, "a:"), pre, front, startMs/1000)
	return st
}

// step is a series' point: after second sec, the count was n.
type step struct{ sec, n int64 }

// series reads the room's j: or a: fields, by second.
func series(state map[string]string, prefix string) []step {
	var out []step
	for k, v := range state {
		if rest, ok := strings.CutPrefix(k, prefix); ok {
			sec, err1 := strconv.ParseInt(rest, 10, 64)
			n, err2 := strconv.ParseInt(v, 10, 64)
			if err1 == nil && err2 == nil {
				out = append(out, step{sec, n})
			}
		}
	}
	slices.SortFunc(out, func(a, b step) int { return int(a.sec - b.sec) })
	return out
}

// queueTimes walks the admitted places 1..front: place t joined in the
// first second whose joins reached it (the start for the pre-queue's
// 1..pre) and was admitted in the first second whose admissions reached
// it.
func queueTimes(joins, admits []step, pre, front, startSec int64) *QueueTimes {
	if front == 0 || len(admits) == 0 {
		return nil
	}
	counts := map[int64]int64{} // seconds in the queue -> places
	j, a := 0, 0
	for t := int64(1); t <= front; t++ {
		for a < len(admits) && admits[a].n < t {
			a++
		}
		if a == len(admits) {
			break
		}
		joined := startSec
		if t > pre {
			for j < len(joins) && joins[j].n < t {
				j++
			}
			if j < len(joins) {
				joined = joins[j].sec
			}
		}
		counts[max(admits[a].sec-joined, 0)]++
	}
	secs := slices.Sorted(maps.Keys(counts))
	var total int64
	for _, c := range counts {
		total += c
	}
	at := func(q float64) int64 {
		need, seen := int64(q*float64(total)+0.999999), int64(0)
		for _, s := range secs {
			if seen += counts[s]; seen >= max(need, 1) {
				return s
			}
		}
		return secs[len(secs)-1]
	}
	return &QueueTimes{P50: at(.5), P99: at(.99), Max: secs[len(secs)-1]}
}
