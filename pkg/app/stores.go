package app

// The stores: one constructor per client (Redis: a server, a cluster,
// sentinels, TLS, ACL users; MySQL), connecting with retries, migrating.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
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
)

// redisClient is the one constructor of a Redis client: a single server,
// a cluster (FLASHSALE_REDIS_CLUSTER, over the seed addresses) or a
// master found through sentinels (FLASHSALE_REDIS_SENTINEL_MASTER), with
// an ACL user and TLS as configured.
func (c Common) redisClient(poolSize int) (redis.UniversalClient, error) {
	return c.redisClientReading(poolSize, c.RedisTimeout)
}

// AdmitClient is a client of the same Redis for admissions, whose read
// timeout is readTimeout: a gateway waits that long for an admission's
// reply, so a script that ran late is heard, not lost
// (admission.New's ac).
func (c Common) AdmitClient(poolSize int, readTimeout time.Duration) (redis.UniversalClient, error) {
	return c.redisClientReading(poolSize, max(readTimeout, c.RedisTimeout))
}

func (c Common) redisClientReading(poolSize int, readTimeout time.Duration) (redis.UniversalClient, error) {
	tlsConfig, err := c.redisTLS()
	if err != nil {
		return nil, err
	}
	opts := &redis.UniversalOptions{
		Addrs: c.redisAddrs(), Username: c.RedisUsername, Password: c.RedisPassword, DB: c.RedisDB,
		MasterName: c.RedisSentinelMaster, SentinelPassword: c.RedisSentinelPassword,
		DialTimeout: c.RedisTimeout, ReadTimeout: readTimeout, WriteTimeout: c.RedisTimeout,
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
		return nil, c.explainRedis(err)
	}
	return store, nil
}

// explainRedis says in the README's words what a failure to reach Redis
// means, naming the variable to change.
func (c Common) explainRedis(err error) error {
	where := "Redis at " + c.RedisAddr + " (FLASHSALE_REDIS_ADDR)"
	switch {
	case c.RedisSentinelMaster != "":
		where = "Redis master " + c.RedisSentinelMaster + " through the sentinels at " + c.RedisAddr + " (FLASHSALE_REDIS_ADDR, FLASHSALE_REDIS_SENTINEL_MASTER)"
	case c.RedisCluster:
		where = "the Redis Cluster at " + c.RedisAddr + " (FLASHSALE_REDIS_ADDR)"
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("cannot reach %s: %w", where, unwrapAll(err))
	}
	return fmt.Errorf("%s: %w", where, err)
}

// unwrapAll is err's innermost cause ("dial tcp …: connection refused"),
// without the layers that name our own steps ("load script").
func unwrapAll(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		if _, ok := next.(*net.OpError); ok {
			return next
		}
		err = next
	}
}

// MySQL connects to MySQL and returns its Store.
func (c Common) MySQL(ctx context.Context) (*db.Store, error) {
	g, err := db.Open(ctx, c.MySQLDSN, db.Options{MaxOpenConns: c.MySQLMaxConns})
	if err != nil {
		return nil, c.explainMySQL(err)
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
	err = waitFor(ctx, func() error {
		r, d, closeAll, err = c.connectOnce(ctx, redisPoolSize)
		return err
	}, func(attempt int, err error) {
		log.Warn("waiting for redis and mysql", zap.Int("attempt", attempt), zap.Error(err))
	})
	return r, d, closeAll, err
}

// waitEvery is how often a process waiting for a store says so.
const waitEvery = 5 * time.Second

// waitFor runs try until it succeeds or ctx ends, backing off between
// tries, and calls waiting with the last error at the first failure and
// then every waitEvery.
func waitFor(ctx context.Context, try func() error, waiting func(attempt int, err error)) error {
	bo := backoff.New(backoff.MinDefault, backoff.MaxDefault)
	var said time.Time
	for attempt := 1; ; attempt++ {
		err := try()
		if err == nil {
			return nil
		}
		if time.Since(said) >= waitEvery {
			waiting(attempt, err)
			said = time.Now()
		}
		if werr := bo.Wait(ctx); werr != nil {
			return fmt.Errorf("gave up waiting (%w): %w", werr, err) // both: a stop (context.Canceled) is a clean exit
		}
	}
}

// Connect is Common.Connect for a command a person typed: it says on
// rt.Progress, in plain words, what it waits for.
func (rt *Runtime) Connect(ctx context.Context, c Common, redisPoolSize int) (r *rdb.Store, d *db.Store, closeAll func(), err error) {
	err = waitFor(ctx, func() error {
		r, d, closeAll, err = c.connectOnce(ctx, redisPoolSize)
		return err
	}, rt.waiting)
	return r, d, closeAll, err
}

// Redis is Common.Redis for a command a person typed, waiting as Connect.
func (rt *Runtime) Redis(ctx context.Context, c Common, poolSize int) (r *rdb.Store, err error) {
	err = waitFor(ctx, func() error {
		r, err = c.Redis(ctx, poolSize)
		return err
	}, rt.waiting)
	return r, err
}

func (rt *Runtime) waiting(_ int, err error) {
	if rt.Progress != nil {
		fmt.Fprintf(rt.Progress, "waiting: %v\n", err)
		return
	}
	rt.Log.Warn("waiting for redis and mysql", zap.Error(err))
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
