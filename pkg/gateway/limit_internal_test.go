package gateway

import (
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flashsale/flashsale/pkg/internal/wait"
)

// With every other limit off (no user rate, no address rate, no sold-out
// pruning), the failed admin authentications are still forgotten once
// their buckets fill again: they are recorded per client address, and
// used to grow without bound because no sweeper ran.
func TestAdminFailuresAreSweptWithEveryOtherLimitOff(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	cfg := Config{AdminToken: "admin-token-admin-token-admin-token", JWTSecret: "jwt-secret-jwt-secret-jwt-secret!!",
		UserRate: -1, SoldOutRefresh: -1} // off; the IP rate is off by default
	g, err := New(cfg, nil, nil, nil, WithClock(func() time.Time { return time.Unix(0, now.Load()) }))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.users != nil || g.addrs != nil || g.soldOut.Refresh() != 0 {
		t.Fatalf("a limit is on: users %v, addrs %v, sold-out refresh %d", g.users != nil, g.addrs != nil, g.soldOut.Refresh())
	}
	for i := range 100 {
		r := httptest.NewRequest("GET", "/admin/v1/stats", nil)
		r.RemoteAddr = "198.51.100." + strconv.Itoa(i) + ":5000"
		r.Header.Set("Authorization", "Bearer wrong")
		g.admin(httptest.NewRecorder(), r)
	}
	if n := g.adminFails.Keys(); n != 100 {
		t.Fatalf("%d addresses recorded, want 100", n)
	}
	now.Add(int64(time.Hour)) // every bucket has filled again
	wait.For(t, 4*sweepEvery, "the sweeper to forget the 100 addresses", func() bool { return g.adminFails.Keys() == 0 })
}
