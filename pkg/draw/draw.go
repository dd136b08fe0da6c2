package draw

import (
	"bytes"
	"container/heap"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
)

// Allocation of a voucher's stock.
const (
	// FirstCome means today's sale, the first claims take the stock.
	FirstCome = "first_come"
	// Draw means entries during the window, winners drawn after it.
	Draw = "draw"
)

// States of a draw (vouchers.draw_state).
const (
	StateOpen    = "open"    // taking entries, or waiting for the draw
	StateDrawing = "drawing" // the draw began: no entry is accepted any more
	StateDrawn   = "drawn"   // winners chosen, seed revealed
)

// Seed is a draw's secret, revealed after the draw.
type Seed [32]byte

// NewSeed draws a seed from the operating system's generator.
func NewSeed() Seed {
	var s Seed
	_, _ = rand.Read(s[:]) // never fails on Linux (crypto/rand doc)
	return s
}

// ErrBadSeed is a seed that is not 64 hex digits.
var ErrBadSeed = errors.New("draw: a seed is 64 hex digits")

// ParseSeed reads Hex's form.
func ParseSeed(h string) (Seed, error) {
	var s Seed
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != len(s) {
		return s, ErrBadSeed
	}
	copy(s[:], b)
	return s, nil
}

// Hex is the seed as published: 64 lowercase hex digits.
func (s Seed) Hex() string { return hex.EncodeToString(s[:]) }

// Commitment is the lowercase hex SHA-256 of the seed.
func (s Seed) Commitment() string {
	sum := sha256.Sum256(s[:])
	return hex.EncodeToString(sum[:])
}

// Key is entry id's key under seed: SHA-256(seed ‖ decimal id).
func (s Seed) Key(id int64) [32]byte {
	var buf [32 + 20]byte
	b := append(buf[:0], s[:]...)
	b = strconv.AppendInt(b, id, 10)
	return sha256.Sum256(b)
}

// Ranked is an entry with its key.
type Ranked struct {
	ID  int64
	Key [32]byte
}

// Before reports whether a comes before b in the draw order.
func Before(a, b Ranked) bool {
	if c := bytes.Compare(a.Key[:], b.Key[:]); c != 0 {
		return c < 0
	}
	return a.ID < b.ID
}

// First keeps the first n entries in the draw order of all those added,
// in memory bounded by n: entries stream through it.
type First struct {
	seed Seed
	n    int
	h    lastOnTop
	seen int64
}

// NewFirst returns a First of n entries under seed.
func NewFirst(seed Seed, n int) *First {
	return &First{seed: seed, n: n, h: make(lastOnTop, 0, min(n, 1<<16))}
}

// Add ranks entry id.
func (f *First) Add(id int64) {
	f.seen++
	if f.n <= 0 {
		return
	}
	r := Ranked{ID: id, Key: f.seed.Key(id)}
	if len(f.h) < f.n {
		heap.Push(&f.h, r)
		return
	}
	if Before(r, f.h[0]) {
		f.h[0] = r
		heap.Fix(&f.h, 0)
	}
}

// Seen is how many entries were added.
func (f *First) Seen() int64 { return f.seen }

// Sorted returns the kept entries in draw order.
func (f *First) Sorted() []Ranked {
	out := slices.Clone(f.h)
	slices.SortFunc(out, func(a, b Ranked) int {
		if Before(a, b) {
			return -1
		}
		if Before(b, a) {
			return 1
		}
		return 0
	})
	return out
}

// lastOnTop is a heap whose top is the last entry in draw order.
type lastOnTop []Ranked

func (h lastOnTop) Len() int           { return len(h) }
func (h lastOnTop) Less(i, j int) bool { return Before(h[j], h[i]) }
func (h lastOnTop) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *lastOnTop) Push(x any)        { *h = append(*h, x.(Ranked)) }
func (h *lastOnTop) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
