package gateway

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

	"golang.org/x/time/rate"
)

// keyedLimiter is a token bucket per key (a user, a client address) held in
// this process's memory: deciding costs no Redis round trip, so honest
// claims pay nothing for it. Each gateway replica limits on its own, so a
// client spread over N replicas may get N times the rate; the admission
// script's per-user limit stays the exact guard, the rate limit only keeps
// bots from costing everyone a script run. Memory is bounded by the keys
// seen recently: a bucket that has filled up again is forgotten (which
// loses nothing: a new one starts full), by sweep.
type keyedLimiter struct {
	limit  rate.Limit
	burst  int
	seed   maphash.Seed
	shards [64]limiterShard
	size   atomic.Int64
}

type limiterShard struct {
	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

// newKeyedLimiter returns a limiter of perSecond with burst, nil (no limit)
// when perSecond is 0.
func newKeyedLimiter(perSecond float64, burst int) *keyedLimiter {
	if perSecond <= 0 {
		return nil
	}
	l := &keyedLimiter{limit: rate.Limit(perSecond), burst: burst, seed: maphash.MakeSeed()}
	for i := range l.shards {
		l.shards[i].buckets = map[string]*rate.Limiter{}
	}
	return l
}

// allow takes a token for key at now. When there is none it returns false
// and how long until there will be one.
func (l *keyedLimiter) allow(key string, now time.Time) (bool, time.Duration) {
	if l == nil {
		return true, 0
	}
	sh := &l.shards[maphash.String(l.seed, key)%uint64(len(l.shards))]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b, ok := sh.buckets[key]
	if !ok {
		b = rate.NewLimiter(l.limit, l.burst)
		sh.buckets[key] = b
		l.size.Add(1)
	}
	if b.AllowN(now, 1) {
		return true, 0
	}
	missing := 1 - b.TokensAt(now)
	return false, time.Duration(missing / float64(l.limit) * float64(time.Second))
}

// blocked reports how long key must wait for a token at now, without
// taking one (0: it has one).
func (l *keyedLimiter) blocked(key string, now time.Time) time.Duration {
	if l == nil {
		return 0
	}
	sh := &l.shards[maphash.String(l.seed, key)%uint64(len(l.shards))]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b, ok := sh.buckets[key]
	if !ok {
		return 0
	}
	if missing := 1 - b.TokensAt(now); missing > 0 {
		return time.Duration(missing / float64(l.limit) * float64(time.Second))
	}
	return 0
}

// sweep forgets the buckets that are full again at now.
func (l *keyedLimiter) sweep(now time.Time) {
	if l == nil {
		return
	}
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for k, b := range sh.buckets {
			if b.TokensAt(now) >= float64(l.burst) {
				delete(sh.buckets, k)
				l.size.Add(-1)
			}
		}
		sh.mu.Unlock()
	}
}

// keys is how many buckets the limiter holds.
func (l *keyedLimiter) keys() int64 {
	if l == nil {
		return 0
	}
	return l.size.Load()
}

// retryAfter is the Retry-After header value of a wait: whole seconds, at
// least 1.
func retryAfter(wait time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(wait.Seconds()))))
}

// writeRateLimited answers 429 rate_limited with Retry-After.
func writeRateLimited(w http.ResponseWriter, wait time.Duration) {
	w.Header().Set("Retry-After", retryAfter(wait))
	writeError(w, errRateLimited)
}

// clientAddr is the address a request comes from: the peer's, or, when the
// peer is a trusted proxy, the right-most X-Forwarded-For address that is
// not a trusted proxy itself (the left-most ones are the client's to
// forge).
func clientAddr(r *http.Request, trusted []netip.Prefix) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil || !inPrefixes(peer.Unmap(), trusted) {
		return host
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break // a forged or broken hop: stop believing the header here
		}
		if !inPrefixes(a.Unmap(), trusted) {
			return a.Unmap().String()
		}
	}
	return host
}

func inPrefixes(a netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parsePrefixes parses FLASHSALE_TRUSTED_PROXIES: CIDRs or single addresses.
func parsePrefixes(list []string) ([]netip.Prefix, error) {
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
