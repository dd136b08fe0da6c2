// Package cli is the worker's command line: the role (no argument) and
// "migrate". cmd/worker hands off to Main, as each role's binary hands off
// to its cli package. Configuration: FLASHSALE_* variables
// (docs/CONFIGURATION.md).
package cli

import (
	"context"
	"os"

	"github.com/flashsale/flashsale/pkg/app"
	"github.com/flashsale/flashsale/pkg/worker"
)

type config struct {
	app.Common
	worker.Config
}

func (c *config) Base() app.Common { return c.Common }

// SetDefaults fills the role's defaults (see app.Main).
func (c *config) SetDefaults() { c.Config.SetDefaults() }

// Validate refuses wrong values before anything is dialled (see app.Main).
func (c *config) Validate() error {
	if err := c.Common.Validate(); err != nil {
		return err
	}
	return c.Config.Validate()
}

// Main runs the worker's command line (app.Main).
func Main() { app.Main(&config{}, run) }

func run(ctx context.Context, cfg *config, rt *app.Runtime) error {
	if cfg.Consumer == "" {
		host, err := os.Hostname()
		if err != nil {
			return err
		}
		cfg.Consumer = host
	}
	return rt.Serve(ctx, cfg.Common, func(ctx context.Context, ready *app.Readiness) error {
		// One blocking read per partition plus room for acks and releases.
		redis, mysql, closeAll, err := cfg.Connect(ctx, rt.Log, 2*cfg.StreamPartitions+4)
		if err != nil {
			return err
		}
		defer closeAll()
		w, err := worker.New(cfg.Config, redis, mysql, rt.Log, worker.WithRegistry(rt.Registry), worker.WithAudit(rt.Audit))
		if err != nil {
			return err
		}
		ready.Set(app.Ready(redis, mysql))
		return w.Run(ctx)
	})
}
