// Package ratelimit is the gateway's per-key token buckets (per user, per
// client address) held in the process's memory, and the client address a
// request comes from behind trusted proxies. It does no I/O: a decision
// costs a map lookup, never a network round trip.
package ratelimit

import (
	"hash/maphash"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Keyed is a token bucket per key (a user, a client address) held in
// this process's memory: deciding costs no Redis round trip, so honest
// claims pay nothing for it. Each gateway replica limits on its own, so a
// client spread over N replicas may get N times the rate; the admission
// script's per-user limit stays the exact guard, the rate limit only keeps
// bots from costing everyone a script run. Memory is bounded by the keys
// seen recently: a bucket that has filled up again is forgotten (which
// loses nothing: a new one starts full), by Sweep, and a shard whose map
// the sweep left at a quarter of its peak is copied into a map of its
// size (a Go map keeps its largest size's memory: a sale's burst of
// distinct users would otherwise hold it after the burst).
//
// A bucket is 16 bytes, filed under the key's 64-bit hash rather than the
// key itself: a sale's burst brings every buyer at once, and a
// rate.Limiter plus the key's string cost about 140 bytes a user (14 MB
// of the gateway's heap for 200,000 users, measured with pprof). Two keys
// whose hashes collide share a bucket: with 64 bits and a seed per
// process, about one pair in 10^9 for 200,000 keys, and the shared bucket
// only halves their rate.
type Keyed struct {
	perNano float64 // tokens per nanosecond
	burst   float64
	seed    maphash.Seed
	shards  [64]limiterShard
	size    atomic.Int64
}

type limiterShard struct {
	mu      sync.Mutex
	buckets map[uint64]tokenBucket
	peak    int // the most buckets held since the map was made
}

// shrinkFrom is the smallest peak for which a shard's map is copied into a
// smaller one: below it the map is small whatever it holds.
const shrinkFrom = 1024

// tokenBucket holds tokens as of at (unix nanoseconds).
type tokenBucket struct {
	tokens float64
	at     int64
}

// refill is b's tokens at now: what it had plus what the rate added since,
// at most burst.
func (l *Keyed) refill(b tokenBucket, now int64) float64 {
	if now <= b.at {
		return b.tokens
	}
	return math.Min(l.burst, b.tokens+float64(now-b.at)*l.perNano)
}

// New returns a limiter of perSecond with burst, nil (no limit)
// when perSecond is 0.
func New(perSecond float64, burst int) *Keyed {
	if perSecond <= 0 {
		return nil
	}
	l := &Keyed{perNano: perSecond / 1e9, burst: float64(burst), seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].buckets = map[uint64]tokenBucket{}
	}
	return l
}

// bucket returns key's hash and shard.
func (l *Keyed) bucket(key string) (uint64, *limiterShard) {
	h := maphash.String(l.seed, key)
	return h, &l.shards[h%uint64(len(l.shards))]
}

// wait is how long until a bucket holding tokens has one.
func (l *Keyed) wait(tokens float64) time.Duration {
	return time.Duration(math.Ceil((1 - tokens) / l.perNano))
}

// Allow takes a token for key at now. When there is none it returns false
// and how long until there will be one.
func (l *Keyed) Allow(key string, now time.Time) (bool, time.Duration) {
	if l == nil {
		return true, 0
	}
	h, sh := l.bucket(key)
	t := now.UnixNano()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b, ok := sh.buckets[h]
	tokens := l.burst // a new bucket starts full
	if ok {
		tokens = l.refill(b, t)
	} else {
		l.size.Add(1)
		sh.peak = max(sh.peak, len(sh.buckets)+1)
	}
	if tokens >= 1 {
		sh.buckets[h] = tokenBucket{tokens: tokens - 1, at: t}
		return true, 0
	}
	sh.buckets[h] = tokenBucket{tokens: tokens, at: t}
	return false, l.wait(tokens)
}

// Blocked reports how long key must wait for a token at now, without
// taking one (0: it has one).
func (l *Keyed) Blocked(key string, now time.Time) time.Duration {
	if l == nil {
		return 0
	}
	h, sh := l.bucket(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b, ok := sh.buckets[h]
	if !ok {
		return 0
	}
	if tokens := l.refill(b, now.UnixNano()); tokens < 1 {
		return l.wait(tokens)
	}
	return 0
}

// Sweep forgets the buckets that are full again at now.
func (l *Keyed) Sweep(now time.Time) {
	if l == nil {
		return
	}
	t := now.UnixNano()
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for k, b := range sh.buckets {
			if l.refill(b, t) >= l.burst {
				delete(sh.buckets, k)
				l.size.Add(-1)
			}
		}
		if sh.peak >= shrinkFrom && len(sh.buckets) < sh.peak/4 {
			m := make(map[uint64]tokenBucket, len(sh.buckets)) // not maps.Clone: it may copy the old size
			for k, b := range sh.buckets {
				m[k] = b
			}
			sh.buckets, sh.peak = m, len(m)
		}
		sh.mu.Unlock()
	}
}

// Keys is how many buckets the limiter holds.
func (l *Keyed) Keys() int64 {
	if l == nil {
		return 0
	}
	return l.size.Load()
}

// RetryAfter is the Retry-After header value of a wait: whole seconds, at
// least 1.
func RetryAfter(wait time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(wait.Seconds()))))
}

// ClientAddr is the address a request comes from: the peer's, or, when the
// peer is a trusted proxy, the right-most X-Forwarded-For address that is
// not a trusted proxy itself (the left-most ones are the client's to
// forge). For logs; limits count a request under Key.
func ClientAddr(r *http.Request, trusted []netip.Prefix) string {
	a, host, ok := clientAddr(r, trusted)
	if !ok || !a.IsValid() {
		return host
	}
	return a.String()
}

// Key is what per-address limits count request r under: ClientAddr, an
// IPv6 address grouped by its first v6Bits (one client holds a whole
// /64, and would otherwise have a bucket per address). ok is false when
// a trusted proxy's X-Forwarded-For has a hop that cannot be read: the
// caller refuses the request, since neither choice is right (the proxy's
// own address would put everyone behind it in one bucket; the hops to
// its left are the client's to forge).
func Key(r *http.Request, trusted []netip.Prefix, v6Bits int) (key string, ok bool) {
	a, host, ok := clientAddr(r, trusted)
	switch {
	case !ok:
		return "", false
	case !a.IsValid():
		return host, true
	case a.Is6() && v6Bits > 0 && v6Bits < 128:
		p, err := a.Prefix(v6Bits)
		if err == nil {
			return p.String(), true
		}
	}
	return a.String(), true
}

// clientAddr is ClientAddr's address (invalid when the peer's cannot be
// read: host is then all there is), and false for a hop that cannot be
// read.
func clientAddr(r *http.Request, trusted []netip.Prefix) (a netip.Addr, host string, ok bool) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, host, true
	}
	peer = peer.Unmap()
	if !inPrefixes(peer, trusted) {
		return peer, host, true
	}
	xff := strings.Join(r.Header.Values("X-Forwarded-For"), ",")
	if strings.TrimSpace(xff) == "" {
		return peer, host, true // the proxy's own request
	}
	hops := strings.Split(xff, ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			return peer, host, false
		}
		if a = a.Unmap(); !inPrefixes(a, trusted) {
			return a, host, true
		}
	}
	return peer, host, true
}

func inPrefixes(a netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ParsePrefixes parses FLASHSALE_TRUSTED_PROXIES: CIDRs or single addresses.
func ParsePrefixes(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !strings.Contains(s, "/") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, err
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
