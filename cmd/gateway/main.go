// Command gateway serves flashsale's HTTP API. "gateway migrate" applies the
// SQL migrations instead. Configuration: FLASHSALE_* variables (README).
package main

import (
	"context"

	"github.com/flashsale/flashsale/pkg/app"
	"github.com/flashsale/flashsale/pkg/gateway"
)

type config struct {
	app.Common
	gateway.Config
	// RedisPoolSize bounds Redis connections (0: go-redis default, 10 per CPU).
	RedisPoolSize int `envconfig:"FLASHSALE_REDIS_POOL_SIZE" default:"0"`
}

func (c *config) Base() app.Common { return c.Common }

func main() { app.Main(&config{}, run) }

func run(ctx context.Context, cfg *config, rt *app.Runtime) error {
	redis, mysql, closeAll, err := cfg.Connect(ctx, cfg.RedisPoolSize)
	if err != nil {
		return err
	}
	defer closeAll()
	gw, err := gateway.New(cfg.Config, redis, mysql, rt.Log, gateway.WithRegistry(rt.Registry))
	if err != nil {
		return err
	}
	return rt.Serve(ctx, cfg.Common, app.Ready(redis, mysql), gw.Run)
}
