package app

// The stores: one constructor per client (Redis: a server, a cluster,
// sentinels, TLS, ACL users; MySQL), connecting with retries, migrating.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/backoff"
	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/rdb"
	schema "github.com/flashsale/flashsale/sql"
)

// redisClient is the one constructor of a Redis client: a single server,
// a cluster (FLASHSALE_REDIS_CLUSTER, over the seed addresses) or a
// master found through sentinels (FLASHSALE_REDIS_SENTINEL_MASTER), with
// an ACL user and TLS as configured.
func (c Common) redisClient(poolSize int) (redis.UniversalClient, error) {
	tlsConfig, err := c.redisTLS()
	if err != nil {
		return nil, err
	}
	opts := &redis.UniversalOptions{
		Addrs: c.redisAddrs(), Username: c.RedisUsername, Password: c.RedisPassword, DB: c.RedisDB,
		MasterName: c.RedisSentinelMaster, SentinelPassword: c.RedisSentinelPassword,
		DialTimeout: c.RedisTimeout, ReadTimeout: c.RedisTimeout, WriteTimeout: c.RedisTimeout,
		PoolTimeout: c.RedisTimeout, ContextTimeoutEnabled: true, PoolSize: poolSize, TLSConfig: tlsConfig,
		// No retry inside go-redis: it resends a command whose connection
		// broke after sending, and a command Redis ran but whose reply was
		// lost must not run twice unseen. An admission would take a second
		// unit; an XREADGROUP ">" would deliver entries nobody processes
		// (the worker re-reads its own pending entries only after a read
		// it saw fail). Every caller retries on its own terms instead.
		MaxRetries: -1,
		// One dial per connection wanted: a dead node (a cluster master
		// being failed over) fails its commands at once, not after five
		// dials 100 ms apart that outlast a claim's deadline.
		DialerRetries: 1,
	}
	switch {
	case c.RedisCluster:
		co := opts.Cluster()
		// go-redis reads the map of slots every minute, and again on a
		// MOVED answer; a killed master answers nothing, so its slots'
		// commands would fail for up to a minute after its replica took
		// over. Read it every 2 s, and at once when a node cannot be
		// dialled.
		co.ClusterStateReloadInterval = 2 * time.Second
		cc := redis.NewClusterClient(co)
		cc.OnNewNode(func(n *redis.Client) { n.AddHook(reloadOnDialError{cc}) })
		return cc, nil
	case c.RedisSentinelMaster != "":
		return redis.NewFailoverClient(opts.Failover()), nil
	default:
		return redis.NewClient(opts.Simple()), nil
	}
}

// reloadOnDialError asks a cluster client to read the map of slots again
// when a node cannot be dialled (its slots may have a new master).
type reloadOnDialError struct{ cc *redis.ClusterClient }

func (h reloadOnDialError) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			h.cc.ReloadState(ctx)
		}
		return conn, err
	}
}

func (reloadOnDialError) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (reloadOnDialError) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (c Common) redisAddrs() []string {
	var out []string
	for _, a := range strings.Split(c.RedisAddr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// redisTLS is the TLS configuration of Redis connections, nil without TLS.
func (c Common) redisTLS() (*tls.Config, error) {
	if !c.RedisTLS {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.RedisTLSServerName}
	if c.RedisTLSCAFile != "" {
		pem, err := os.ReadFile(c.RedisTLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("FLASHSALE_REDIS_TLS_CA_FILE: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("FLASHSALE_REDIS_TLS_CA_FILE: %s holds no PEM certificate", c.RedisTLSCAFile)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// Redis connects to Redis and returns its Store, with every script loaded.
func (c Common) Redis(ctx context.Context, poolSize int) (*rdb.Store, error) {
	client, err := c.redisClient(poolSize)
	if err != nil {
		return nil, err
	}
	if c.TracingEnabled() {
		// Commands without their arguments: those carry user ids.
		if err := redisotel.InstrumentTracing(client, redisotel.WithDBStatement(false)); err != nil {
			client.Close()
			return nil, fmt.Errorf("redis tracing: %w", err)
		}
	}
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
	if c.TracingEnabled() {
		// Statements without their values: those carry user ids.
		if err := g.Use(db.TracingPlugin()); err != nil {
			return nil, fmt.Errorf("mysql tracing: %w", err)
		}
	}
	return db.New(g), nil
}

// Connect opens both stores, retrying with backoff until they answer or
// ctx ends, so a process started while Redis or MySQL is down waits for
// them (not ready) instead of exiting. closeAll releases them.
func (c Common) Connect(ctx context.Context, log *zap.Logger, redisPoolSize int) (r *rdb.Store, d *db.Store, closeAll func(), err error) {
	bo := backoff.New(backoff.MinDefault, backoff.MaxDefault)
	for attempt := 1; ; attempt++ {
		r, d, closeAll, err = c.connectOnce(ctx, redisPoolSize)
		if err == nil {
			return r, d, closeAll, nil
		}
		if attempt == 1 || attempt%10 == 0 {
			log.Warn("waiting for redis and mysql", zap.Int("attempt", attempt), zap.Error(err))
		}
		if werr := bo.Wait(ctx); werr != nil {
			return nil, nil, nil, fmt.Errorf("connect: %w (last error: %v)", werr, err)
		}
	}
}

func (c Common) connectOnce(ctx context.Context, redisPoolSize int) (r *rdb.Store, d *db.Store, closeAll func(), err error) {
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
	if c.MigrateDSN != "" {
		c.MySQLDSN = c.MigrateDSN
	}
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
