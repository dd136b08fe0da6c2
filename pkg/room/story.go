package room

// A room's story, for the sale's report: who joined, was admitted, bought
// with their pass, let it lapse, or is still waiting, and how long the
// admitted waited, from what the room keeps (its state, the j: and a:
// series room.lua writes, the voucher's rx: marks of passes that bought).

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Story is a room's account.
type Story struct {
	Joined    int64 `json:"joined"`    // places given (the pre-queue's included)
	Prequeued int64 `json:"prequeued"` // of them, joins of the pre-queue
	Admitted  int64 `json:"admitted"`  // places admitted
	Bought    int64 `json:"bought"`    // admitted places whose pass bought
	Lapsed    int64 `json:"lapsed"`    // admitted places whose pass ran out unused
	Waiting   int64 `json:"waiting"`   // places never admitted (yet): told sold_out, closed, or still waiting
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

// Story reads voucher v's room's story; nil when it never had a room.
func (s *Store) Story(ctx context.Context, v int64) (*Story, error) {
	state, startMs, bought, err := s.r.RoomStory(ctx, v)
	if err != nil || len(state) == 0 {
		return nil, err
	}
	return story(state, startMs, bought), nil
}

// story computes a Story from a room's state hash, its voucher's start
// (unix ms) and the places whose pass bought.
func story(state map[string]string, startMs int64, bought []int64) *Story {
	num := func(k string) int64 { n, _ := strconv.ParseInt(state[k], 10, 64); return n }
	pre, tail, front, gone := num("pre"), num("tail"), num("front"), num("gone")
	st := &Story{Prequeued: pre, Joined: pre, Admitted: front}
	if num("frozen") == 1 {
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
