// Package keyspace names flashsale's keys in Redis that the parts of
// pkg/rdb share: a partition's prefix and stream, and a voucher's
// buckets, their keys and how a voucher is laid out over them. The
// table of every key is pkg/rdb's keys.go.
package keyspace

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Prefix starts every key of partition p: its hash tag {pP}, so that a
// script touches one Redis Cluster slot.
func Prefix(p int) string { return "flashsale:{p" + strconv.Itoa(p) + "}:" }

// StreamKey is the order stream of partition p.
func StreamKey(p int) string { return Prefix(p) + "orders" }

// Bucket is where one bucket of a voucher lives.
type Bucket struct {
	P int   // its partition: its keys' hash tag and its stream
	V int64 // the voucher
	N int   // its number, 0..buckets-1
}

// BucketOf is bucket n of voucher v, in a Redis of partitions
// partitions: bucket 0 in partition v mod partitions, the others in the
// partitions after it.
func BucketOf(partitions int, v int64, n int) Bucket {
	return Bucket{P: (int(uint64(v)%uint64(partitions)) + n) % partitions, V: v, N: n}
}

// Key is the bucket's hash: flashsale:{pP}:v:V, and :bN after it for
// N > 0. Its other keys are named by the methods after it.
func (b Bucket) Key() string {
	k := Prefix(b.P) + "v:" + strconv.FormatInt(b.V, 10)
	if b.N > 0 {
		k += ":b" + strconv.Itoa(b.N)
	}
	return k
}

func (b Bucket) Day(day string) string      { return DayKey(b.Key(), day) }
func (b Bucket) Released() string           { return b.Key() + ":released" }
func (b Bucket) Pool() string               { return PoolKey(b.Key()) }
func (b Bucket) Changes() string            { return b.Key() + ":changes" }
func (b Bucket) Dirty() string              { return b.Key() + ":dirty" }
func (b Bucket) MovesOut() string           { return b.Key() + ":moves:out" }
func (b Bucket) MovesIn() string            { return b.Key() + ":moves:in" }
func (b Bucket) Stream() string             { return StreamKey(b.P) }
func (b Bucket) Idem(user, k string) string { return IdemKey(b.Key(), user, k) }

// The keys of a bucket whose key (Bucket.Key) is key, for a caller that has
// it already (the admission path builds it once per batch).
func DayKey(key, day string) string      { return key + ":day:" + day }
func PoolKey(key string) string          { return key + ":pool" }
func IdemKey(key, user, k string) string { return key + ":idem:" + user + ":" + k }

// ProofKey is the used-key of the proof of work whose challenge's
// signature is id, spent on the voucher (bucket) whose hash is key; id ""
// is the key a claim without a proof names (the scripts ignore it).
func ProofKey(key, id string) string {
	if id == "" {
		id = "-"
	}
	return key + ":proof:" + id
}

// UserPrefix starts the voucher hash's field of a user's count.
const UserPrefix = "u:"

// PendingPrefix starts the voucher hash's field of a user's index of
// admissions: the positions ("ms-P", pkg/order) admit.lua appended,
// space-separated, which pending.lua reads and prunes.
const PendingPrefix = "o:"

// MaxBuckets bounds a voucher's stock_buckets.
const MaxBuckets = 64

// UserBucket is the bucket, of n, in which user's claims are decided.
func UserBucket(user string, n int) int {
	if n <= 1 {
		return 0
	}
	return int(UserHash(user) % uint32(n))
}

// UserHash is user's FNV-1a hash, 32 bits: UserBucket's, and admit.lua's
// fnv.
func UserHash(user string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(user); i++ {
		h ^= uint32(user[i])
		h *= 16777619
	}
	return h
}

// Layout is how a voucher's stock is spread: over n buckets, and, while
// it splits (pkg/rdb/split), into to (0 when it does not).
type Layout struct{ N, To int }

// Span is the number of buckets that exist: to while splitting.
func (l Layout) Span() int { return max(l.N, l.To) }

// ParseLayout reads a bucket's buckets field (split.lua): "N", "N~M" or
// "N>M" (splitting from N to M: pre-copying, frozen), "" (1).
func ParseLayout(str string) (Layout, error) {
	if str == "" {
		return Layout{N: 1}, nil
	}
	from, to, splitting := strings.Cut(str, ">")
	if !splitting {
		from, to, splitting = strings.Cut(str, "~")
	}
	n, err := strconv.Atoi(from)
	l := Layout{N: n}
	if err == nil && splitting {
		l.To, err = strconv.Atoi(to)
	}
	if err != nil || n < 1 || n > MaxBuckets || l.To < 0 || l.To > MaxBuckets {
		return Layout{}, fmt.Errorf("bad buckets %q", str)
	}
	return l, nil
}

// ReadLayout reads voucher v's layout from its bucket 0, in a Redis of
// partitions partitions (1 bucket when Redis does not hold v).
func ReadLayout(ctx context.Context, c redis.Cmdable, partitions int, v int64) (Layout, error) {
	raw, err := c.HMGet(ctx, BucketOf(partitions, v, 0).Key(), "stock", "buckets").Result()
	if err != nil {
		return Layout{}, fmt.Errorf("read buckets of voucher %d: %w", v, err)
	}
	if raw[0] == nil {
		return Layout{N: 1}, nil
	}
	str, _ := raw[1].(string)
	l, err := ParseLayout(str)
	if err != nil {
		return l, fmt.Errorf("voucher %d: %w", v, err)
	}
	return l, nil
}

// Buckets lists the buckets of voucher v laid out as l, in a Redis of
// partitions partitions: every one that exists, the new ones too while
// it splits.
func Buckets(partitions int, v int64, l Layout) []Bucket {
	out := make([]Bucket, l.Span())
	for i := range out {
		out[i] = BucketOf(partitions, v, i)
	}
	return out
}
