package app

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/kelseyhightower/envconfig"

	"github.com/flashsale/flashsale/pkg/ops"
	"github.com/flashsale/flashsale/pkg/order"
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
	// MemoryLimit is the container's memory limit in bytes (the chart sets
	// it from resources.limits.memory); 0: none known. The process then
	// keeps its Go heap under MemoryLimitShare of it (see memory.go).
	MemoryLimit int64 `envconfig:"FLASHSALE_MEMORY_LIMIT" default:"0"`
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
	case c.MemoryLimit < 0 || (c.MemoryLimit > 0 && c.MemoryLimit < minMemoryLimit):
		return fmt.Errorf("FLASHSALE_MEMORY_LIMIT must be 0 (none) or at least %d bytes, got %d", minMemoryLimit, c.MemoryLimit)
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

// Renamed are the variables still read under their old name for one
// release, new name to old; the old one is read only when the new one is
// not set, and Load says so (the binary logs a warning naming both).
var Renamed = map[string]string{
	"FLASHSALE_TAKEOVER_MIN_IDLE":    "FLASHSALE_CLAIM_MIN_IDLE",
	"FLASHSALE_REAPER_ROUND_TIMEOUT": "FLASHSALE_REAPER_PASS_TIMEOUT",
	"FLASHSALE_REAPER_MAX_PER_ROUND": "FLASHSALE_REAPER_MAX_PER_PASS",
}

// Load fills cfg from FLASHSALE_* variables, and returns the old names
// read in place of their new ones (Renamed), as "OLD (now NEW)".
// Every field names its full variable (FLASHSALE_...), so no unprefixed
// variable of the environment is ever read.
func Load(cfg any) (old []string, err error) {
	for name, was := range Renamed {
		if _, set := os.LookupEnv(name); set {
			continue
		}
		if v, set := os.LookupEnv(was); set {
			// Read under the new name for this call only: the
			// environment is left as it was.
			if err := os.Setenv(name, v); err != nil {
				return nil, err
			}
			defer os.Unsetenv(name) //nolint:errcheck
			old = append(old, was+" (now "+name+")")
		}
	}
	slices.Sort(old)
	return old, plainParseError(envconfig.Process("", cfg))
}

// plainParseError says a value envconfig could not read in the project's
// words: the variable, its value, and what it wants ("assigning
// FLASHSALE_REDIS_TIMEOUT to RedisTimeout: converting 'abc' to type
// time.Duration. details: …" names a Go field and type a reader of the
// manual never met).
func plainParseError(err error) error {
	var pe *envconfig.ParseError
	if !errors.As(err, &pe) {
		return err
	}
	want := "a value of type " + pe.TypeName
	switch pe.TypeName {
	case "time.Duration":
		want = "a duration such as 500ms, 2s or 1m"
	case "int", "int64", "int32":
		want = "a whole number"
	case "uint", "uint64", "uint32":
		want = "a whole number, 0 or more"
	case "float64", "float32":
		want = "a number such as 0.5"
	case "bool":
		want = "true or false"
	case "[]string":
		want = "a comma-separated list"
	}
	return fmt.Errorf("%s=%q: want %s", pe.KeyName, pe.Value, want)
}
