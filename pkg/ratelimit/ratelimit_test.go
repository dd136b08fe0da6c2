package ratelimit

import (
	"net/http/httptest"
	"runtime"
	"strconv"
	"testing"
	"time"
)

func TestClientAddrBelievesOnlyTrustedProxies(t *testing.T) {
	trusted, err := ParsePrefixes([]string{"10.0.0.0/8", "192.0.2.1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, remote, xff, want string
	}{
		{"no proxy", "198.51.100.7:5000", "", "198.51.100.7"},
		{"untrusted peer: header ignored", "198.51.100.7:5000", "203.0.113.1", "198.51.100.7"},
		{"trusted peer", "10.1.2.3:5000", "203.0.113.1", "203.0.113.1"},
		{"a forged left-most hop is skipped", "10.1.2.3:5000", "1.1.1.1, 203.0.113.1", "203.0.113.1"},
		{"trusted hops are skipped", "10.1.2.3:5000", "203.0.113.1, 192.0.2.1, 10.9.9.9", "203.0.113.1"},
		{"garbage stops the walk (the request is refused: Key)", "10.1.2.3:5000", "203.0.113.1, bogus", "10.1.2.3"},
		{"only trusted hops", "10.1.2.3:5000", "10.4.4.4", "10.1.2.3"},
		{"IPv6 peer", "[2001:db8::1]:5000", "203.0.113.1", "2001:db8::1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.remote
			if tt.xff != "" {
				r.Header.Set("X-Forwarded-For", tt.xff)
			}
			if got := ClientAddr(r, trusted); got != tt.want {
				t.Fatalf("ClientAddr = %q, want %q", got, tt.want)
			}
		})
	}
	if _, err := ParsePrefixes([]string{"10.0.0.0/33"}); err == nil {
		t.Fatal("a bad CIDR was accepted")
	}
}

// Limits count IPv6 clients by prefix (a /64 is one client), and refuse
// a trusted proxy's hop that cannot be read rather than count everyone
// behind the proxy as the proxy.
func TestKeyGroupsIPv6AndRefusesUnreadableHops(t *testing.T) {
	trusted, err := ParsePrefixes([]string{"10.0.0.0/8", "2001:db8:ffff::/48"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, remote, xff string
		bits              int
		want              string
		ok                bool
	}{
		{"IPv4 as it is", "198.51.100.7:5000", "", 64, "198.51.100.7", true},
		{"IPv6 by its /64", "[2001:db8::1]:5000", "", 64, "2001:db8::/64", true},
		{"another address of the /64", "[2001:db8::40]:5000", "", 64, "2001:db8::/64", true},
		{"another /64", "[2001:db8:0:1::1]:5000", "", 64, "2001:db8:0:1::/64", true},
		{"a /56", "[2001:db8:0:1::1]:5000", "", 56, "2001:db8::/56", true},
		{"whole addresses", "[2001:db8::1]:5000", "", 128, "2001:db8::1", true},
		{"IPv6 through a trusted proxy", "10.1.2.3:5000", "2001:db8::40", 64, "2001:db8::/64", true},
		{"a trusted IPv6 proxy", "[2001:db8:ffff::1]:5000", "198.51.100.9", 64, "198.51.100.9", true},
		{"an unreadable last hop is refused", "10.1.2.3:5000", "203.0.113.1, bogus", 64, "", false},
		{"an unreadable hop behind trusted ones too", "10.1.2.3:5000", "bogus, 10.9.9.9", 64, "", false},
		{"an unreadable forged hop left of the client's is never read", "10.1.2.3:5000", "bogus, 203.0.113.1", 64, "203.0.113.1", true},
		{"the proxy's own request", "10.1.2.3:5000", "", 64, "10.1.2.3", true},
		{"a mapped IPv4", "[::ffff:198.51.100.7]:5000", "", 64, "198.51.100.7", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.remote
			if tt.xff != "" {
				r.Header.Set("X-Forwarded-For", tt.xff)
			}
			got, ok := Key(r, trusted, tt.bits)
			if got != tt.want || ok != tt.ok {
				t.Fatalf("Key = %q, %v; want %q, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

// Memory stays bounded by the keys seen recently: a bucket full again is
// forgotten, one still short of tokens is kept.
func TestLimiterForgetsFullBuckets(t *testing.T) {
	l := New(10, 2)
	now := time.Now()
	for i := range 1000 {
		if ok, _ := l.Allow("user"+strconv.Itoa(i), now); !ok {
			t.Fatalf("first request of user%d refused", i)
		}
	}
	for range 2 {
		l.Allow("busy", now)
	}
	ok, wait := l.Allow("busy", now)
	if ok || wait <= 0 || wait > 100*time.Millisecond {
		t.Fatalf("third request at once: ok=%v wait=%s, want refused for up to 100ms", ok, wait)
	}
	l.Sweep(now.Add(150 * time.Millisecond)) // users refilled (1 token in 100ms), busy not yet (needs 200ms)
	if n := l.Keys(); n != 1 {
		t.Fatalf("%d buckets kept, want only the busy one", n)
	}
	l.Sweep(now.Add(time.Second))
	if n := l.Keys(); n != 0 {
		t.Fatalf("%d buckets kept after all refilled", n)
	}
	if New(0, 5) != nil {
		t.Fatal("rate 0 is no limiter")
	}
}

// A sale's burst of distinct users leaves no memory behind: once their
// buckets are full again and swept, the maps that held them are given up.
func TestLimiterGivesUpTheMemoryOfABurst(t *testing.T) {
	heap := func() int64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	l := New(10, 20)
	now := time.Now()
	base := heap()
	for i := range 200_000 {
		l.Allow("user"+strconv.Itoa(i), now)
	}
	full := heap() - base
	l.Sweep(now.Add(time.Hour))
	left := heap() - base
	if l.Keys() != 0 {
		t.Fatalf("%d buckets kept", l.Keys())
	}
	if full < 1<<20 || left > full/10 {
		t.Fatalf("the burst held %d bytes, %d after the sweep: want under a tenth", full, left)
	}
	// The shrunk maps take new users as before.
	l.Allow("one", now)
	if ok, _ := l.Allow("one", now); !ok {
		t.Fatal("the second request of a new user refused")
	}
	runtime.KeepAlive(l)
}

// BenchmarkUserLimiter is what the in-process limit costs a claim: one
// bucket lookup and update among 200,000 users, from all cores at once.
// (A shared limiter in Redis would cost a network round trip instead.)
// It also reports the heap the limiter holds per user once all 200,000
// have a bucket (bytes/user).
func BenchmarkUserLimiter(b *testing.B) {
	keys := make([]string, 200_000)
	for i := range keys {
		keys[i] = "user" + strconv.Itoa(i)
	}
	now := time.Now()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l := New(10, 20)
	for _, k := range keys {
		l.Allow(k, now)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perUser := float64(after.HeapAlloc-before.HeapAlloc) / float64(len(keys))
	b.ResetTimer()
	b.ReportAllocs()
	defer func() { b.ReportMetric(perUser, "bytes/user") }()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			l.Allow(keys[i%len(keys)], now)
			i += 7919
		}
	})
}

// BenchmarkSweep is what the gateway's sweeper costs each second in a
// sale: 20,000 users' buckets, of claims spread over the last second.
func BenchmarkSweep(b *testing.B) {
	l := New(10, 20)
	now := time.Now()
	for i := range 20_000 {
		l.Allow("user"+strconv.Itoa(i), now.Add(time.Duration(i)*50*time.Microsecond))
	}
	b.ResetTimer()
	for range b.N {
		l.Sweep(now.Add(time.Second)) // the first forgets those full again, the rest walk what is left
	}
}
