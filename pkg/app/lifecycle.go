package app

// The process lifecycle: the ops listener, readiness, shutdown.

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/ops"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// Runtime is what a binary's run function gets besides its configuration.
type Runtime struct {
	Log *zap.Logger
	// Audit logs one line per order created, cancelled or dead-lettered,
	// never sampled (zap.NewNop() when FLASHSALE_AUDIT_LOG is false).
	Audit *zap.Logger
	// Actions logs what an operator did to a voucher (voucher.LogActions),
	// at Info whatever the level: a role's Log, and for a command a
	// logger of its own, as a command's Log keeps only errors.
	Actions *zap.Logger
	// Registry holds the process's metrics, served on /metrics.
	Registry *prometheus.Registry
	// Progress, for a command a person typed, is where it says what it
	// waits for (stderr); nil for a role, which logs instead.
	Progress io.Writer
}

// Readiness is what /readyz checks; until Set it answers "starting".
type Readiness struct {
	check atomic.Pointer[func(context.Context) error]
}

// Set installs the readiness check (once the role's dependencies exist).
func (r *Readiness) Set(check func(context.Context) error) { r.check.Store(&check) }

// Check runs the installed check.
func (r *Readiness) Check(ctx context.Context) error {
	f := r.check.Load()
	if f == nil {
		return &ops.NotReady{Dependency: "starting", Err: errors.New("connecting to redis and mysql")}
	}
	return (*f)(ctx)
}

// Serve starts the ops listener, then runs role, which connects what it
// needs, calls ready.Set, and works until its context ends. When ctx ends,
// /readyz fails at once, role's context ends ShutdownDelay later, and Serve
// returns when role has returned.
func (rt *Runtime) Serve(ctx context.Context, c Common, role func(ctx context.Context, ready *Readiness) error) error {
	var ready Readiness
	srv := ops.New(c.Config, rt.Registry, ready.Check, rt.Log)
	if err := srv.Listen(); err != nil {
		return err // before anything else: a port taken is the first thing said
	}
	opsCtx, stopOps := context.WithCancel(context.WithoutCancel(ctx))
	defer stopOps()
	opsErr := make(chan error, 1)
	go func() { opsErr <- srv.Run(opsCtx) }()

	roleCtx, stopRole := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRole()
	stop := context.AfterFunc(ctx, func() {
		srv.ShuttingDown()
		time.AfterFunc(c.ShutdownDelay, stopRole)
	})
	defer stop()
	roleErr := make(chan error, 1)
	go func() { roleErr <- role(roleCtx, &ready) }()

	select {
	case err := <-roleErr:
		stopOps()
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// Stopped while still connecting (or waiting): a clean exit.
			err = nil
		}
		return errors.Join(err, <-opsErr)
	case err := <-opsErr:
		stopRole()
		return errors.Join(err, <-roleErr)
	}
}

// Ready is the readiness check of a process that needs both stores.
func Ready(r *rdb.Store, d *db.Store) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := r.Client().Ping(ctx).Err(); err != nil {
			return &ops.NotReady{Dependency: "redis", Err: err}
		}
		sqlDB, err := d.DB().DB()
		if err == nil {
			err = sqlDB.PingContext(ctx)
		}
		if err != nil {
			return &ops.NotReady{Dependency: "mysql", Err: err}
		}
		return nil
	}
}
