package ops

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashsale/flashsale/pkg/internal/wait"
)

func readyz(t *testing.T, ready func(context.Context) error) (int, string) {
	t.Helper()
	srv := httptest.NewServer(New(Config{}, prometheus.NewRegistry(), ready, nil).Handler())
	defer srv.Close()
	res, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// /readyz names the failing dependency and nothing of its error, which can
// carry addresses, user names and server messages.
func TestReadyzNamesTheDependencyOnly(t *testing.T) {
	code, body := readyz(t, func(context.Context) error {
		return &NotReady{Dependency: "mysql", Err: errors.New("Error 1045: Access denied for user 'shop'@'10.1.2.3'")}
	})
	if code != http.StatusServiceUnavailable || body != "not ready: mysql\n" {
		t.Fatalf("got %d %q, want 503 \"not ready: mysql\"", code, body)
	}
	code, body = readyz(t, func(context.Context) error { return errors.New("dial tcp 10.1.2.3:6379: refused") })
	if code != http.StatusServiceUnavailable || body != "not ready\n" {
		t.Fatalf("got %d %q, want 503 \"not ready\"", code, body)
	}
}

// A check that ignores its context still gets an answer at ReadyTimeout;
// one that honours it names its dependency.
func TestReadyzAnswersWhenACheckHangs(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	start := time.Now()
	code, body := readyz(t, func(context.Context) error { <-release; return nil })
	if code != http.StatusServiceUnavailable || body != "not ready\n" {
		t.Fatalf("got %d %q, want 503 \"not ready\"", code, body)
	}
	// Loose: a probe timeout is seconds; a hang would be forever.
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("answered after %s", d)
	}
	code, body = readyz(t, func(ctx context.Context) error {
		<-ctx.Done()
		return &NotReady{Dependency: "redis", Err: ctx.Err()}
	})
	if code != http.StatusServiceUnavailable || body != "not ready: redis\n" {
		t.Fatalf("got %d %q, want 503 \"not ready: redis\"", code, body)
	}
}

// pprof, when enabled, is served on its own listener (loopback by
// default), never on the ops listener that the monitoring namespace reaches.
func TestPprofHasItsOwnLoopbackListener(t *testing.T) {
	if PprofAddrDefault[:10] != "127.0.0.1:" {
		t.Fatalf("pprof's default address %q is not loopback", PprofAddrDefault)
	}
	free := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	opsAddr, pprofAddr := free(), free()
	s := New(Config{Addr: opsAddr, Pprof: true, PprofAddr: pprofAddr}, prometheus.NewRegistry(), func(context.Context) error { return nil }, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	status := func(url string) int {
		code := 0
		wait.For(t, 10*time.Second, "an answer from "+url, func() bool {
			res, err := http.Get(url)
			if err != nil {
				return false
			}
			res.Body.Close()
			code = res.StatusCode
			return true
		})
		return code
	}
	if c := status("http://" + pprofAddr + "/debug/pprof/"); c != http.StatusOK {
		t.Fatalf("pprof listener: %d", c)
	}
	if c := status("http://" + opsAddr + "/debug/pprof/"); c != http.StatusNotFound {
		t.Fatalf("ops listener serves pprof: %d", c)
	}
}
