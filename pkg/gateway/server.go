package gateway

// Serving: the listeners, and a shutdown that finishes what is under way.

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/gateway/operator"
	"github.com/flashsale/flashsale/pkg/ops"
)

// Run serves on cfg.HTTPAddr (and the admin API on cfg.AdminAddr, when
// set) until ctx ends, then stops accepting, lets in-flight requests
// finish (up to ShutdownTimeout) and returns.
func (g *Gateway) Run(ctx context.Context) error {
	l, err := net.Listen("tcp", g.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("FLASHSALE_HTTP_ADDR %s: %w (set FLASHSALE_HTTP_ADDR to a free port, say :8081)", g.cfg.HTTPAddr, err)
	}
	served := []listener{{l, g.Handler(), "public"}}
	if g.cfg.AdminAddr != "" {
		al, err := net.Listen("tcp", g.cfg.AdminAddr)
		if err != nil {
			l.Close()
			return fmt.Errorf("FLASHSALE_ADMIN_ADDR: %w", err)
		}
		served = append(served, listener{al, g.AdminHandler(), "admin"})
	}
	return g.serve(ctx, served...)
}

// Serve is Run with the public handler on a listener of the caller's.
func (g *Gateway) Serve(ctx context.Context, l net.Listener) error {
	return g.serve(ctx, listener{l, g.Handler(), "public"})
}

type listener struct {
	l    net.Listener
	h    http.Handler
	name string
}

func (g *Gateway) serve(ctx context.Context, ls ...listener) error {
	var deadline time.Time // of the shutdown: ShutdownTimeout after it begins
	defer func() {
		if deadline.IsZero() {
			deadline = time.Now().Add(g.cfg.ShutdownTimeout)
		}
		g.closeBy(deadline)
	}()
	err := g.redis.EnsureGroups(ctx)
	if err == nil {
		err = g.redis.CheckDurability(ctx)
	}
	if err != nil {
		for _, l := range ls {
			l.l.Close()
		}
		return err
	}
	defer ops.StartCounts(ctx, g.log, cmp.Or(g.countsEvery, ops.CountsEvery), "claims", g.claimTotals)()
	errc := make(chan error, len(ls))
	servers := make([]*http.Server, len(ls))
	for i, l := range ls {
		servers[i] = &http.Server{
			Handler: l.h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
			WriteTimeout: operator.CreateTimeout + 10*time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: ops.MaxHeaderBytes,
			ErrorLog: zap.NewStdLog(g.log.Named("http")), ConnContext: framedContext,
			// "OPTIONS *" reaches the handlers and their framing checks: Go's
			// own answer to it (200, the connection kept) skipped them, and
			// an HTTP/1.0 OPTIONS carried a chunked request past the guard.
			DisableGeneralOptionsHandler: true,
		}
		go func() { errc <- servers[i].Serve(framedListener{l.l}) }()
		g.log.Info("gateway listening", zap.String("api", l.name), zap.String("addr", l.l.Addr().String()), zap.Int("partitions", g.redis.Partitions()))
	}
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	g.log.Info("gateway shutting down")
	// One bound for all of it: the requests in flight, then the
	// admissions' round trips (closeBy).
	deadline = time.Now().Add(g.cfg.ShutdownTimeout)
	sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	for _, srv := range servers {
		if serr := srv.Shutdown(sctx); serr != nil && err == nil {
			err = fmt.Errorf("shutdown: %w", serr)
		}
	}
	g.log.Info("gateway's requests drained", zap.Duration("took", g.cfg.ShutdownTimeout-time.Until(deadline)))
	return err
}
