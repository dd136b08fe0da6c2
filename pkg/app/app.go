// Package app is the wiring the flashsale binaries share: common
// configuration, the logger, the Redis and MySQL connections, the migrate
// subcommand and the process lifecycle. Configuration is read with
// envconfig in cmd/ only; this package receives it.
package app

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/rdb"
	schema "github.com/flashsale/flashsale/sql"
)

// Common is the configuration every binary reads (FLASHSALE_* variables).
type Common struct {
	// RedisAddr is host:port of Redis.
	RedisAddr string `envconfig:"FLASHSALE_REDIS_ADDR" default:"127.0.0.1:6379"`
	// RedisPassword authenticates to Redis (empty: none).
	RedisPassword string `envconfig:"FLASHSALE_REDIS_PASSWORD"`
	// RedisDB selects the Redis database.
	RedisDB int `envconfig:"FLASHSALE_REDIS_DB" default:"0"`
	// RedisTimeout bounds every Redis call that does not block by design.
	RedisTimeout time.Duration `envconfig:"FLASHSALE_REDIS_TIMEOUT" default:"500ms"`
	// MySQLDSN is a go-sql-driver DSN of the flashsale database.
	MySQLDSN string `envconfig:"FLASHSALE_MYSQL_DSN" default:"root@tcp(127.0.0.1:3306)/flashsale"`
	// MySQLMaxConns bounds MySQL connections per process.
	MySQLMaxConns int `envconfig:"FLASHSALE_MYSQL_MAX_CONNS" default:"32"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `envconfig:"FLASHSALE_LOG_LEVEL" default:"info"`
	// StreamPartitions is the number of order streams; a voucher lives in
	// partition id mod StreamPartitions. Every role must agree on it.
	StreamPartitions int `envconfig:"FLASHSALE_STREAM_PARTITIONS" default:"8"`
	// ConsumerGroup is the workers' consumer group.
	ConsumerGroup string `envconfig:"FLASHSALE_CONSUMER_GROUP" default:"flashsale-workers"`
}

// Load fills cfg from FLASHSALE_* variables.
// Every field names its full variable (FLASHSALE_...), so no unprefixed
// variable of the environment is ever read.
func Load(cfg any) error { return envconfig.Process("", cfg) }

// NewLogger returns zap's production JSON logger on stderr at level.
func NewLogger(level string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("FLASHSALE_LOG_LEVEL: %w", err)
	}
	cfg := zap.NewProductionConfig()
	cfg.Level = zap.NewAtomicLevelAt(lvl)
	cfg.DisableStacktrace = true
	return cfg.Build()
}

// Redis connects to Redis and returns its Store, with every script loaded.
func (c Common) Redis(ctx context.Context, poolSize int) (*rdb.Store, error) {
	opts := &redis.Options{
		Addr: c.RedisAddr, Password: c.RedisPassword, DB: c.RedisDB,
		DialTimeout: c.RedisTimeout, ReadTimeout: c.RedisTimeout, WriteTimeout: c.RedisTimeout,
		PoolTimeout: c.RedisTimeout, ContextTimeoutEnabled: true, PoolSize: poolSize,
		MaxRetries: 1,
	}
	client := redis.NewClient(opts)
	store, err := rdb.New(client, c.StreamPartitions, c.ConsumerGroup)
	if err != nil {
		client.Close()
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := store.Load(lctx); err != nil {
		client.Close()
		return nil, fmt.Errorf("redis %s: %w", c.RedisAddr, err)
	}
	return store, nil
}

// MySQL connects to MySQL and returns its Store.
func (c Common) MySQL(ctx context.Context) (*db.Store, error) {
	g, err := db.Open(ctx, c.MySQLDSN, db.Options{MaxOpenConns: c.MySQLMaxConns})
	if err != nil {
		return nil, err
	}
	return db.New(g), nil
}

// Connect opens both stores; close releases them.
func (c Common) Connect(ctx context.Context, redisPoolSize int) (r *rdb.Store, d *db.Store, closeAll func(), err error) {
	if r, err = c.Redis(ctx, redisPoolSize); err != nil {
		return nil, nil, nil, err
	}
	if d, err = c.MySQL(ctx); err != nil {
		r.Client().Close()
		return nil, nil, nil, err
	}
	return r, d, func() {
		r.Client().Close()
		if sqlDB, err := d.DB().DB(); err == nil {
			sqlDB.Close()
		}
	}, nil
}

// Migrate applies the embedded SQL migrations.
func (c Common) Migrate(ctx context.Context, log *zap.Logger) error {
	store, err := c.MySQL(ctx)
	if err != nil {
		return err
	}
	sqlDB, err := store.DB().DB()
	if err != nil {
		return err
	}
	defer sqlDB.Close()
	applied, err := schema.Apply(ctx, sqlDB)
	if err != nil {
		return err
	}
	log.Info("migrations applied", zap.Strings("applied", applied))
	return nil
}

// Command is a subcommand of a binary besides migrate; args are the
// arguments after its name.
type Command[C any] struct {
	Name string
	Run  func(ctx context.Context, cfg C, log *zap.Logger, args []string) error
}

// Main runs a binary: it reads cfg from the environment, builds the logger,
// runs "migrate" or one of commands when named by the first argument, and
// run otherwise, with a context cancelled on SIGTERM or SIGINT. Every
// failure ends in one log line and exit status 1.
func Main[C interface{ Base() Common }](cfg C, run func(ctx context.Context, cfg C, log *zap.Logger) error, commands ...Command[C]) {
	bootLog, _ := NewLogger("info")
	if err := Load(cfg); err != nil {
		bootLog.Error("invalid configuration", zap.Error(err))
		os.Exit(1)
	}
	log, err := NewLogger(cfg.Base().LogLevel)
	if err != nil {
		bootLog.Error("invalid configuration", zap.Error(err))
		os.Exit(1)
	}
	defer log.Sync() //nolint:errcheck

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err = dispatch(ctx, cfg, log, os.Args[1:], run, commands)
	if err != nil {
		log.Error("exiting", zap.Error(err))
		log.Sync() //nolint:errcheck
		os.Exit(1)
	}
}

func dispatch[C interface{ Base() Common }](ctx context.Context, cfg C, log *zap.Logger, args []string,
	run func(ctx context.Context, cfg C, log *zap.Logger) error, commands []Command[C]) error {
	if len(args) == 0 {
		return run(ctx, cfg, log)
	}
	if args[0] == "migrate" {
		return cfg.Base().Migrate(ctx, log)
	}
	names := []string{"migrate"}
	for _, c := range commands {
		if c.Name == args[0] {
			return c.Run(ctx, cfg, log, args[1:])
		}
		names = append(names, c.Name)
	}
	return fmt.Errorf("unknown command %q (commands: %s)", args[0], strings.Join(names, ", "))
}
