// Package ops serves what operators and Kubernetes ask a process: /livez,
// /readyz, /metrics and, when enabled, /debug/pprof. It listens apart from
// the gateway's API so probes and scrapes never queue behind claims. It
// also logs a role's counts every CountsEvery (counts.go).
package ops

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// Config of the ops listener.
type Config struct {
	// Addr is the listen address. Default ":9090".
	Addr string `envconfig:"FLASHSALE_OPS_ADDR" default:":9090"`
	// Pprof serves /debug/pprof/ when true, on PprofAddr. Default false.
	Pprof bool `envconfig:"FLASHSALE_PPROF" default:"false"`
	// PprofAddr is pprof's own listener: loopback unless bound wider on
	// purpose (a profile shows the process's memory and code; reach it
	// with kubectl port-forward). Default "127.0.0.1:6060".
	PprofAddr string `envconfig:"FLASHSALE_PPROF_ADDR" default:"127.0.0.1:6060"`
}

// PprofAddrDefault is PprofAddr's default.
const PprofAddrDefault = "127.0.0.1:6060"

// Server is the ops listener of one process.
type Server struct {
	cfg      Config
	gatherer prometheus.Gatherer
	ready    func(context.Context) error
	log      *zap.Logger
	stopping atomic.Bool
	// listeners are Addr's and PprofAddr's, once bound (Listen).
	listeners []net.Listener
}

// New returns a Server. ready checks the process's dependencies; /livez
// never calls it, so a database blip does not restart every pod.
func New(cfg Config, g prometheus.Gatherer, ready func(context.Context) error, log *zap.Logger) *Server {
	if log == nil {
		log = zap.NewNop()
	}
	return &Server{cfg: cfg, gatherer: g, ready: ready, log: log.Named("ops")}
}

// ShuttingDown makes /readyz fail from now on, so the process is taken out
// of load balancing before it stops accepting.
func (s *Server) ShuttingDown() { s.stopping.Store(true) }

// Handler serves the ops endpoints.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) { write(w, http.StatusOK, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if s.stopping.Load() {
			write(w, http.StatusServiceUnavailable, "shutting down")
			return
		}
		if err := s.checkReady(r.Context()); err != nil {
			// The body names the dependency only: error texts carry
			// addresses and server messages, which are for the log.
			s.log.Warn("not ready", zap.Error(err))
			body := "not ready"
			var nr *NotReady
			if errors.As(err, &nr) {
				body += ": " + nr.Dependency
			}
			write(w, http.StatusServiceUnavailable, body)
			return
		}
		write(w, http.StatusOK, "ok")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{}))
	return mux
}

// PprofHandler serves /debug/pprof/, on its own listener.
func PprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// ReadyTimeout bounds a readiness check: /readyz answers within it even if
// a dependency hangs (Kubernetes' probe timeout defaults to 1s).
const ReadyTimeout = 800 * time.Millisecond

// NotReady is a readiness failure of one dependency ("redis", "mysql").
type NotReady struct {
	Dependency string
	Err        error
}

func (e *NotReady) Error() string { return e.Dependency + ": " + e.Err.Error() }
func (e *NotReady) Unwrap() error { return e.Err }

// checkReady runs the readiness check and gives up at ReadyTimeout, even
// if the check ignores its context.
func (s *Server) checkReady(ctx context.Context) error {
	hard, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	// The check's own deadline comes first, so a check that honours it
	// still says which dependency was too slow.
	soft, cancelSoft := context.WithTimeout(hard, ReadyTimeout*3/4)
	defer cancelSoft()
	done := make(chan error, 1)
	go func() { done <- s.ready(soft) }()
	select {
	case err := <-done:
		return err
	case <-hard.Done():
		return fmt.Errorf("readiness check: %w", hard.Err())
	}
}

func write(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body + "\n"))
}

// MaxHeaderBytes bounds a request's header on every listener of the
// binaries. Go's default is 1 MiB, and a connection holding an unfinished
// header holds that much: 200 such connections took a gateway from 24 to
// 303 MiB. A bearer token and the API's headers fit in a few KiB; a header
// over this is answered 431 and its connection closed.
const MaxHeaderBytes = 32 << 10

// Listen binds Addr (and PprofAddr, when enabled), so that a port taken
// is said before anything else starts; Run serves them.
func (s *Server) Listen() error {
	l, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("FLASHSALE_OPS_ADDR %s: %w (each process on one host needs a port of its own: set FLASHSALE_OPS_ADDR, say :9091)", s.cfg.Addr, err)
	}
	s.listeners = []net.Listener{l}
	if s.cfg.Pprof {
		pl, err := net.Listen("tcp", cmp.Or(s.cfg.PprofAddr, PprofAddrDefault))
		if err != nil {
			l.Close()
			return fmt.Errorf("FLASHSALE_PPROF_ADDR: %w", err)
		}
		s.listeners = append(s.listeners, pl)
	}
	return nil
}

// Run serves until ctx ends: the ops endpoints on Addr and, when enabled,
// pprof on PprofAddr (binding them first unless Listen did).
func (s *Server) Run(ctx context.Context) error {
	if s.listeners == nil {
		if err := s.Listen(); err != nil {
			return err
		}
	}
	listeners, l := s.listeners, s.listeners[0]
	servers := []*http.Server{{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: MaxHeaderBytes, DisableGeneralOptionsHandler: true}}
	if len(listeners) > 1 {
		// No write timeout: a CPU profile or trace streams for as long as
		// it was asked to.
		servers = append(servers, &http.Server{Handler: PprofHandler(), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute,
			MaxHeaderBytes: MaxHeaderBytes, DisableGeneralOptionsHandler: true})
		s.log.Info("pprof listening", zap.String("addr", listeners[1].Addr().String()))
	}
	errc := make(chan error, len(servers))
	for i, srv := range servers {
		go func() { errc <- srv.Serve(listeners[i]) }()
	}
	s.log.Info("ops listening", zap.String("addr", l.Addr().String()), zap.Bool("pprof", s.cfg.Pprof))
	var err2 error
	select {
	case err2 = <-errc:
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range servers {
		if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) && err2 == nil {
			err2 = err
		}
	}
	return err2
}
