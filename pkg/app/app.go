// Package app is the wiring the flashsale binaries share: common
// configuration, the logger, the Redis and MySQL connections, the migrate
// subcommand and the process lifecycle. Configuration is read with
// envconfig in cmd/ only; this package receives it.
package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/kelseyhightower/envconfig"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/backoff"
	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/ops"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	schema "github.com/flashsale/flashsale/sql"
)

// Common is the configuration every binary reads (FLASHSALE_* variables).
type Common struct {
	// RedisAddr is host:port of Redis.
	RedisAddr string `envconfig:"FLASHSALE_REDIS_ADDR" default:"127.0.0.1:6379"`
	// RedisCluster makes RedisAddr the seed nodes of a Redis Cluster.
	RedisCluster bool `envconfig:"FLASHSALE_REDIS_CLUSTER" default:"false"`
	// RedisSentinelMaster, when set, makes RedisAddr the sentinels, which
	// name this master (and the new one after a failover).
	RedisSentinelMaster string `envconfig:"FLASHSALE_REDIS_SENTINEL_MASTER"`
	// RedisSentinelPassword authenticates to the sentinels (empty: none).
	RedisSentinelPassword string `envconfig:"FLASHSALE_REDIS_SENTINEL_PASSWORD"`
	// RedisTLS speaks TLS to Redis; RedisTLSCAFile is a PEM file of the CA
	// to trust (default: the system's); RedisTLSServerName overrides the
	// name checked in the server's certificate.
	RedisTLS           bool   `envconfig:"FLASHSALE_REDIS_TLS" default:"false"`
	RedisTLSCAFile     string `envconfig:"FLASHSALE_REDIS_TLS_CA_FILE"`
	RedisTLSServerName string `envconfig:"FLASHSALE_REDIS_TLS_SERVER_NAME"`
	// RedisUsername is the Redis ACL user (empty: the default user).
	RedisUsername string `envconfig:"FLASHSALE_REDIS_USERNAME"`
	// RedisPassword authenticates to Redis (empty: none).
	RedisPassword string `envconfig:"FLASHSALE_REDIS_PASSWORD"`
	// RedisDB selects the Redis database.
	RedisDB int `envconfig:"FLASHSALE_REDIS_DB" default:"0"`
	// RedisTimeout bounds every Redis call that does not block by design.
	RedisTimeout time.Duration `envconfig:"FLASHSALE_REDIS_TIMEOUT" default:"500ms"`
	// MySQLDSN is a go-sql-driver DSN of the flashsale database.
	MySQLDSN string `envconfig:"FLASHSALE_MYSQL_DSN" default:"root@tcp(127.0.0.1:3306)/flashsale"`
	// MigrateDSN is the DSN "migrate" uses: a user allowed DDL, so the
	// roles' users need none (empty: MySQLDSN).
	MigrateDSN string `envconfig:"FLASHSALE_MIGRATE_DSN"`
	// MySQLMaxConns bounds MySQL connections per process.
	MySQLMaxConns int `envconfig:"FLASHSALE_MYSQL_MAX_CONNS" default:"32"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `envconfig:"FLASHSALE_LOG_LEVEL" default:"info"`
	// LogFormat is json (zap's production keys), gcp (time, severity,
	// message, as Cloud Logging reads them) or ecs (@timestamp, log.level,
	// message).
	LogFormat string `envconfig:"FLASHSALE_LOG_FORMAT" default:"json"`
	// AuditLog logs each order created, cancelled and dead-lettered, never
	// sampled. Default true.
	AuditLog bool `envconfig:"FLASHSALE_AUDIT_LOG" default:"true"`
	// ShutdownDelay is how long /readyz fails after SIGTERM before the
	// process stops taking work, so load balancers stop sending first.
	ShutdownDelay time.Duration `envconfig:"FLASHSALE_SHUTDOWN_DELAY" default:"0s"`
	// Ops is the ops listener (FLASHSALE_OPS_ADDR, FLASHSALE_PPROF).
	ops.Config
	// StreamPartitions is the number of order streams; a voucher lives in
	// partition id mod StreamPartitions. Every role must agree on it.
	StreamPartitions int `envconfig:"FLASHSALE_STREAM_PARTITIONS" default:"8"`
	// ConsumerGroup is the workers' consumer group.
	ConsumerGroup string `envconfig:"FLASHSALE_CONSUMER_GROUP" default:"flashsale-workers"`
	// TracingEndpoint is an OTLP/HTTP traces URL
	// (http://collector:4318/v1/traces); empty: no tracing.
	TracingEndpoint string `envconfig:"FLASHSALE_TRACING_ENDPOINT"`
	// TracingSampleRatio is the share of traces kept (0..1), unless the
	// caller's traceparent decided. Default 0.01.
	TracingSampleRatio float64 `envconfig:"FLASHSALE_TRACING_SAMPLE_RATIO" default:"0.01"`
}

// Validate reports the first wrong common value, naming its variable, so a
// binary exits at start instead of retrying what can never work.
func (c Common) Validate() error {
	switch {
	case !validAddrs(c.redisAddrs()):
		return fmt.Errorf("FLASHSALE_REDIS_ADDR must be host:port, or a comma-separated list of them, got %q", c.RedisAddr)
	case c.RedisCluster && c.RedisSentinelMaster != "":
		return errors.New("FLASHSALE_REDIS_CLUSTER and FLASHSALE_REDIS_SENTINEL_MASTER cannot both be set")
	case c.RedisCluster && c.RedisDB != 0:
		return fmt.Errorf("FLASHSALE_REDIS_DB must be 0 on a cluster, got %d", c.RedisDB)
	case !c.RedisCluster && c.RedisSentinelMaster == "" && len(c.redisAddrs()) > 1:
		return errors.New("FLASHSALE_REDIS_ADDR lists several addresses: set FLASHSALE_REDIS_CLUSTER or FLASHSALE_REDIS_SENTINEL_MASTER")
	case !c.RedisTLS && (c.RedisTLSCAFile != "" || c.RedisTLSServerName != ""):
		return errors.New("FLASHSALE_REDIS_TLS_CA_FILE and FLASHSALE_REDIS_TLS_SERVER_NAME need FLASHSALE_REDIS_TLS=true")
	case c.RedisDB < 0:
		return fmt.Errorf("FLASHSALE_REDIS_DB must not be negative, got %d", c.RedisDB)
	case c.RedisTimeout <= 0:
		return fmt.Errorf("FLASHSALE_REDIS_TIMEOUT must be positive, got %s", c.RedisTimeout)
	case c.MySQLMaxConns < 1:
		return fmt.Errorf("FLASHSALE_MYSQL_MAX_CONNS must be at least 1, got %d", c.MySQLMaxConns)
	case c.ShutdownDelay < 0:
		return fmt.Errorf("FLASHSALE_SHUTDOWN_DELAY must not be negative, got %s", c.ShutdownDelay)
	case c.StreamPartitions < 1 || c.StreamPartitions > order.MaxPartitions:
		return fmt.Errorf("FLASHSALE_STREAM_PARTITIONS must be 1..%d, got %d", order.MaxPartitions, c.StreamPartitions)
	case strings.TrimSpace(c.ConsumerGroup) == "":
		return errors.New("FLASHSALE_CONSUMER_GROUP must not be empty")
	case c.Addr != "" && !validAddr(c.Addr):
		return fmt.Errorf("FLASHSALE_OPS_ADDR must be [host]:port, got %q", c.Addr)
	case c.TracingEndpoint != "" && !validTracingEndpoint(c.TracingEndpoint):
		return fmt.Errorf("FLASHSALE_TRACING_ENDPOINT must be an http(s) URL, got %q", c.TracingEndpoint)
	case c.TracingSampleRatio < 0 || c.TracingSampleRatio > 1:
		return fmt.Errorf("FLASHSALE_TRACING_SAMPLE_RATIO must be 0..1, got %v", c.TracingSampleRatio)
	}
	if _, err := mysql.ParseDSN(c.MySQLDSN); err != nil {
		// The error may quote the DSN, password included: say only why.
		return fmt.Errorf("FLASHSALE_MYSQL_DSN is not a valid DSN (user:pass@tcp(host:3306)/dbname): %s", dsnProblem(err))
	}
	if c.MigrateDSN != "" {
		if _, err := mysql.ParseDSN(c.MigrateDSN); err != nil {
			return fmt.Errorf("FLASHSALE_MIGRATE_DSN is not a valid DSN (user:pass@tcp(host:3306)/dbname): %s", dsnProblem(err))
		}
	}
	if _, err := c.redisTLS(); err != nil {
		return err
	}
	if _, _, err := NewLoggers(c.LogLevel, c.LogFormat, false); err != nil {
		return err
	}
	return nil
}

func validAddrs(addrs []string) bool {
	if len(addrs) == 0 {
		return false
	}
	for _, a := range addrs {
		if !validAddr(a) {
			return false
		}
	}
	return true
}

// validAddr reports a [host]:port with a numeric port.
func validAddr(a string) bool {
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 0 && n <= 65535
}

// dsnProblem is the driver's complaint about a DSN without the DSN itself.
func dsnProblem(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, ":"); i > 0 && strings.Contains(msg[:i], "@") {
		return "malformed"
	}
	return msg
}

// Load fills cfg from FLASHSALE_* variables.
// Every field names its full variable (FLASHSALE_...), so no unprefixed
// variable of the environment is ever read.
func Load(cfg any) error { return envconfig.Process("", cfg) }

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

// Runtime is what a binary's run function gets besides its configuration.
type Runtime struct {
	Log *zap.Logger
	// Audit logs one line per order created, cancelled or dead-lettered,
	// never sampled (zap.NewNop() when FLASHSALE_AUDIT_LOG is false).
	Audit *zap.Logger
	// Registry holds the process's metrics, served on /metrics.
	Registry *prometheus.Registry
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
		return errors.Join(fmt.Errorf("ops listener: %w", err), <-roleErr)
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

// Command is a subcommand of a binary besides migrate; args are the
// arguments after its name.
type Command[C any] struct {
	Name string
	// Summary is one line on what it does; Usage its arguments and flags,
	// one per line (help and NAME -h print them).
	Summary, Usage string
	Run            func(ctx context.Context, cfg C, rt *Runtime, args []string) error
	// Check, when set, replaces the configuration's Validate for this
	// command: a command that needs fewer variables than the role.
	Check func(cfg C) error
}

// Exit codes of the commands a person types (not of the roles' processes,
// which exit 1 on any failure, with a JSON log line): 0 done, 1 done and
// the answer is "no" (reconcile: the stores differ), 2 failed or misused.
const (
	ExitNo     = 1
	ExitFailed = 2
)

// ExitError makes a command exit with Code (ExitNo, say) instead of
// ExitFailed.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// wantsHelp reports whether args ask for a command's usage.
func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			return true
		}
	}
	return false
}

// Config is what a binary's configuration offers Main: its common part and
// a check of every value.
type Config interface {
	Base() Common
	// Validate fills defaults and reports the first wrong value, naming
	// its variable.
	Validate() error
}

// Main runs a binary: "help" and "version" answer without reading the
// environment; otherwise it reads cfg from the environment, validates it,
// builds the loggers and the metrics registry, runs "migrate" or one of
// commands when named by the first argument, and run otherwise, with a
// context cancelled on SIGTERM or SIGINT. Every failure ends in one log line
// and exit status 1; a bad value does so before anything is dialled.
func Main[C Config](cfg C, run func(ctx context.Context, cfg C, rt *Runtime) error, commands ...Command[C]) {
	bin := filepath.Base(os.Args[0])
	// A command a person typed (not the role's process, nor migrate, which
	// init containers run) answers in plain text on stderr, with the exit
	// codes above.
	var typed *Command[C]
	if len(os.Args) > 1 {
		switch name := os.Args[1]; name {
		case "help", "-h", "-help", "--help":
			PrintHelp(os.Stdout, cfg, commands)
			return
		case "version", "--version":
			fmt.Println(ReadBuild().String())
			return
		case "migrate":
		default:
			for i := range commands {
				if commands[i].Name == name {
					typed = &commands[i]
				}
			}
			if typed == nil {
				fmt.Fprintf(os.Stderr, "%s: unknown command %q (commands: %s; %s help describes them)\n", bin, name, strings.Join(commandNames(commands), ", "), bin)
				os.Exit(ExitFailed)
			}
			if wantsHelp(os.Args[2:]) {
				printUsage(os.Stdout, bin, *typed)
				return
			}
		}
	}
	bootLog, _, _ := NewLoggers("info", "json", false)
	fail := func(err error) {
		if typed != nil {
			fmt.Fprintf(os.Stderr, "%s %s: %v\n", bin, typed.Name, err)
			os.Exit(ExitFailed)
		}
		bootLog.Error("invalid configuration", zap.Error(err))
		bootLog.Sync() //nolint:errcheck
		os.Exit(1)
	}
	if err := Load(cfg); err != nil {
		fail(err)
	}
	check := cfg.Validate
	if typed != nil && typed.Check != nil {
		check = func() error { return typed.Check(cfg) }
	}
	if err := check(); err != nil {
		fail(err)
	}
	c := cfg.Base()
	level := c.LogLevel
	if typed != nil && level != "debug" {
		// A person reads the command's output and its one line of error;
		// the JSON log keeps only errors (debug shows everything).
		level = "error"
	}
	log, audit, err := NewLoggers(level, c.LogFormat, c.AuditLog)
	if err != nil {
		fail(err)
	}
	defer log.Sync()   //nolint:errcheck
	defer audit.Sync() //nolint:errcheck
	// go-redis's own lines (pool and connection trouble) in the same JSON
	// as everything else, instead of plain text on stderr.
	redis.SetLogger(redisLogger{log.Named("redis")})
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		ReadBuild().Collector())
	rt := &Runtime{Log: log, Audit: audit, Registry: reg}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	stopTracing, err := c.StartTracing(ctx, filepath.Base(os.Args[0]))
	if err != nil {
		fail(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = stopTracing(sctx) // flush the spans in hand
	}()
	err = dispatch(ctx, cfg, rt, os.Args[1:], run, commands)
	if err != nil && typed != nil {
		log.Sync() //nolint:errcheck
		fmt.Fprintf(os.Stderr, "%s %s: %v\n", bin, typed.Name, err)
		code := ExitFailed
		var ee *ExitError
		if errors.As(err, &ee) {
			code = ee.Code
		}
		os.Exit(code)
	}
	if err != nil {
		log.Error("exiting", zap.Error(err))
		log.Sync() //nolint:errcheck
		os.Exit(1)
	}
}

func dispatch[C Config](ctx context.Context, cfg C, rt *Runtime, args []string,
	run func(ctx context.Context, cfg C, rt *Runtime) error, commands []Command[C]) error {
	if len(args) == 0 {
		return run(ctx, cfg, rt)
	}
	if args[0] == "migrate" {
		return cfg.Base().Migrate(ctx, rt.Log)
	}
	for _, c := range commands {
		if c.Name == args[0] {
			return c.Run(ctx, cfg, rt, args[1:])
		}
	}
	return fmt.Errorf("unknown command %q (commands: %s)", args[0], strings.Join(commandNames(commands), ", "))
}

func commandNames[C any](commands []Command[C]) []string {
	names := []string{"migrate", "help", "version"}
	for _, c := range commands {
		names = append(names, c.Name)
	}
	return names
}

// printUsage writes a command's usage (its -h).
func printUsage[C any](w io.Writer, bin string, c Command[C]) {
	fmt.Fprintf(w, "usage: %s %s %s\n\n%s\n", bin, c.Name, strings.SplitN(c.Usage, "\n", 2)[0], c.Summary)
	if rest := strings.SplitN(c.Usage, "\n", 2); len(rest) == 2 {
		fmt.Fprintf(w, "\n%s\n", rest[1])
	}
	fmt.Fprintf(w, "\nConfiguration comes from FLASHSALE_* variables (%s help lists them).\nExit status: 0 done, 1 done and the answer is no (reconcile: the stores differ), 2 failed or misused.\n", bin)
}
