package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// Options of a Stack.
type Options struct {
	// Dir holds binaries, server data and logs. Required.
	Dir string
	// Bin, when set, is a directory with the gateway, worker and reaper
	// binaries built already (make's bin/): they are put in Dir instead
	// of built.
	Bin string
	// RedisAddr and MySQLDSN use existing servers; empty starts throwaway ones.
	RedisAddr string
	MySQLDSN  string
	// OwnMariaDB starts a mariadbd for this stack alone (Stack.MariaDB),
	// for a test that kills, pauses or reconfigures it. Otherwise, in a
	// test binary, the stack gets a fresh database on one throwaway
	// mariadbd its tests share (sharedMariaDB): starting one costs each
	// stack a second and a half of both cores. A stack whose mariadbd a
	// test partitions or gives users (MySQLNetns, RestrictedUser,
	// LeastPrivilege) has its own anyway.
	OwnMariaDB bool
	// RedisArgs are extra redis-server arguments for a throwaway Redis.
	RedisArgs []string
	// Workers is the number of worker processes (0: none).
	Workers int
	// Reaper starts a reaper process too.
	Reaper bool
	// RedisNetns runs the single redis-server in a network namespace of
	// its own (Stack.RedisNet), so a test can partition it from the
	// stack's processes. Needs root (testsrv.NetnsUnavailable).
	RedisNetns bool
	// MySQLNetns runs the stack's mariadbd in a network namespace of its
	// own (Stack.MySQLNet). Needs root.
	MySQLNetns bool
	// MySQLIOTimeout, when set, bounds each read and write of the
	// processes' MySQL connections (the DSN's readTimeout and
	// writeTimeout; pkg/db's default is 15 s): how long a statement whose
	// answer never comes is waited for.
	MySQLIOTimeout time.Duration
	// SharedNetns, with RedisNetns and MySQLNetns, runs Redis (the master,
	// with Sentinel) and mariadbd in one namespace; the replica and the
	// sentinel stay outside it.
	SharedNetns bool
	// Partitions is FLASHSALE_STREAM_PARTITIONS (default 8).
	Partitions int
	// Race builds the binaries with the race detector.
	Race bool
	// Env is added to every process's environment.
	Env []string
	// ReaperEnv is added to the reapers' environment.
	ReaperEnv []string
	// GatewayPort: the gateway's port on 127.0.0.1 (0: a free one).
	GatewayPort int
	// Progress, when set, is told each step of StartStack as it ends
	// ("binaries built", "redis-server up", …), with the time it took:
	// make demo and make dev say them.
	Progress func(step string, took time.Duration)
	// RestrictedUser runs the binaries as a MySQL user with every privilege
	// on the database and none global (no SUPER), as in production, on a
	// throwaway mariadbd with its grant tables in force: read_only then
	// refuses their writes, as after a managed-MySQL failover.
	RestrictedUser bool
	// Cluster runs the stack on a throwaway Redis Cluster of three masters
	// (FLASHSALE_REDIS_CLUSTER) instead of one redis-server.
	Cluster bool
	// ClusterReplicas gives each of the cluster's masters replicas.
	ClusterReplicas int
	// ClusterNetns, with Cluster, runs the cluster's first node, a master,
	// in a network namespace of its own (Stack.RedisNet;
	// testsrv.StartClusterIn). Needs root.
	ClusterNetns bool
	// RedisReplica gives the single redis-server a replica (ReplicaOf),
	// for FLASHSALE_REDIS_DURABILITY=replica.
	RedisReplica bool
	// Sentinel gives the single redis-server a replica and a sentinel
	// (quorum one), and the binaries find the master through it
	// (FLASHSALE_REDIS_SENTINEL_MASTER=flashsale).
	Sentinel bool
	// LeastPrivilege runs each role as its own Redis ACL user
	// (rdb.ACLRules) and its own MySQL user with only its DML grants
	// (db.Grants), and migrates as root through FLASHSALE_MIGRATE_DSN,
	// as docs/SECURITY.md tells production to. Needs throwaway servers.
	LeastPrivilege bool
}

// Stack is a running flashsale: servers, a gateway and workers.
type Stack struct {
	opts       Options
	bin        string
	URL        string // gateway base URL
	AdminToken string
	JWTSecret  string
	Redis      *testsrv.Redis // nil when RedisAddr was given, or on a cluster
	Replica    *testsrv.Redis // Options.RedisReplica or Sentinel: Redis's replica, in sync at start
	RedisNet   *testsrv.Netns // Options.RedisNetns: the namespace Redis runs in
	// extraGateways are gateways started beside the stack's (StartGatewayIn).
	extraGateways []*Proc
	MySQLNet      *testsrv.Netns // Options.MySQLNetns: the namespace mariadbd runs in
	Sentinel      *testsrv.Sentinel
	Cluster       *testsrv.Cluster // Options.Cluster
	MariaDB       *testsrv.MariaDB // nil when MySQLDSN was given
	// RootDSN is the database as root (the harness's checks, read_only);
	// the binaries use the restricted user's DSN when RestrictedUser.
	RootDSN string
	RDB     *rdb.Store
	DB      *db.Store
	Gateway *Proc
	Workers []*Proc
	// WorkerNames are the workers' consumer names.
	WorkerNames []string
	Reaper      *Proc // nil unless Options.Reaper
	env         []string
	roleEnv     map[string][]string // added to a role's processes
	restarts    map[int]int
	tokens      sync.Map // user → their token (Token)
}

// StartStack builds the binaries, starts whatever servers are missing,
// migrates, and starts the gateway and the workers.
func StartStack(ctx context.Context, o Options) (s *Stack, err error) {
	if o.Partitions <= 0 {
		o.Partitions = 8
	}
	s = &Stack{opts: o, bin: filepath.Join(o.Dir, "bin"), AdminToken: randomHex(16), JWTSecret: randomHex(32), restarts: map[int]int{}}
	started := s // the returns below set s to nil
	defer func() {
		if err != nil {
			started.Close()
		}
	}()
	if err := os.MkdirAll(filepath.Join(o.Dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	stepAt := time.Now()
	step := func(what string) {
		if o.Progress != nil {
			o.Progress(what, time.Since(stepAt))
		}
		stepAt = time.Now()
	}
	if o.Bin != "" {
		if err := place(o.Bin, s.bin, "gateway", "worker", "reaper"); err != nil {
			return nil, fmt.Errorf("the binaries of %s (make build): %w", o.Bin, err)
		}
		step("binaries from " + o.Bin + " (gateway, worker, reaper)")
	} else {
		if err := Build(s.bin, o.Race, "gateway", "worker", "reaper"); err != nil {
			return nil, err
		}
		step("binaries built (gateway, worker, reaper)")
	}
	redisAddr := o.RedisAddr
	var redisEnv []string
	if o.Cluster {
		if o.ClusterNetns {
			if s.RedisNet, err = testsrv.NewNetns("redis"); err != nil {
				return nil, err
			}
			s.Cluster, err = testsrv.StartClusterIn(s.RedisNet, filepath.Join(o.Dir, "cluster"), 3, o.ClusterReplicas)
		} else {
			s.Cluster, err = testsrv.StartClusterWithReplicas(filepath.Join(o.Dir, "cluster"), 3, o.ClusterReplicas)
		}
		if err != nil {
			return nil, err
		}
		redisAddr = strings.Join(s.Cluster.Addrs(), ",")
		redisEnv = []string{"FLASHSALE_REDIS_CLUSTER=true"}
	}
	if redisAddr == "" {
		if o.RedisNetns {
			if s.RedisNet, err = testsrv.NewNetns("redis"); err != nil {
				return nil, err
			}
			s.Redis, err = testsrv.StartRedisIn(s.RedisNet, filepath.Join(o.Dir, "redis"), o.RedisArgs...)
		} else {
			s.Redis, err = testsrv.StartRedis(filepath.Join(o.Dir, "redis"), o.RedisArgs...)
		}
		if err != nil {
			return nil, err
		}
		redisAddr = s.Redis.Addr
		if o.RedisReplica || o.Sentinel {
			var extra []string
			if s.RedisNet != nil { // reached by the master, in its namespace, at this side's address
				extra = []string{"--bind", "127.0.0.1", s.RedisNet.Gateway, "--replica-announce-ip", s.RedisNet.Gateway, "--protected-mode", "no"}
			}
			if s.Replica, err = startReplica(filepath.Join(o.Dir, "redis-replica"), s.Redis.Addr, extra...); err != nil {
				return nil, err
			}
		}
		if o.Sentinel {
			if s.Sentinel, err = testsrv.StartSentinel(filepath.Join(o.Dir, "sentinel"), SentinelMaster, s.Redis.Addr); err != nil {
				return nil, err
			}
			redisAddr = s.Sentinel.Addr
			redisEnv = []string{"FLASHSALE_REDIS_SENTINEL_MASTER=" + SentinelMaster}
		}
	}
	if redisAddr != o.RedisAddr {
		step("redis up at " + redisAddr)
	}
	dsn := o.MySQLDSN
	if dsn == "" && testing.Testing() && !o.OwnMariaDB && !o.MySQLNetns && !o.RestrictedUser && !o.LeastPrivilege {
		m, err := sharedMariaDB()
		if err != nil {
			return nil, err
		}
		if dsn, err = m.CreateDatabase("flashsale"); err != nil {
			return nil, err
		}
		step("database flashsale created on the tests' shared mariadbd")
	}
	if dsn == "" {
		start := testsrv.StartMariaDB
		if o.RestrictedUser || o.LeastPrivilege {
			start = testsrv.StartMariaDBWithGrants
		}
		if o.MySQLNetns && o.SharedNetns && s.RedisNet != nil {
			s.MySQLNet = s.RedisNet
		} else if o.MySQLNetns {
			if s.MySQLNet, err = testsrv.NewNetns("mysql"); err != nil {
				return nil, err
			}
		}
		if s.MySQLNet != nil {
			start = func(dir string) (*testsrv.MariaDB, error) { return testsrv.StartMariaDBIn(s.MySQLNet, dir) }
		}
		if s.MariaDB, err = start(filepath.Join(o.Dir, "mariadb")); err != nil {
			return nil, err
		}
		if dsn, err = s.MariaDB.CreateDatabase("flashsale"); err != nil {
			return nil, err
		}
		step("mariadbd up, database flashsale created")
	}
	s.RootDSN = dsn
	if o.MySQLIOTimeout > 0 {
		dsn += "&readTimeout=" + o.MySQLIOTimeout.String() + "&writeTimeout=" + o.MySQLIOTimeout.String()
	}
	if o.RestrictedUser {
		if s.MariaDB == nil {
			return nil, errors.New("RestrictedUser needs a throwaway mariadbd")
		}
		if dsn, err = testsrv.RestrictedUser(dsn); err != nil {
			return nil, err
		}
	}
	port := o.GatewayPort
	if port == 0 {
		if port, err = testsrv.FreePort(); err != nil {
			return nil, err
		}
	}
	s.URL = "http://127.0.0.1:" + strconv.Itoa(port)
	s.env = append([]string{
		"FLASHSALE_REDIS_ADDR=" + redisAddr, "FLASHSALE_MYSQL_DSN=" + dsn,
		"FLASHSALE_STREAM_PARTITIONS=" + strconv.Itoa(o.Partitions),
		"FLASHSALE_HTTP_ADDR=127.0.0.1:" + strconv.Itoa(port),
		"FLASHSALE_ADMIN_TOKEN=" + s.AdminToken, "FLASHSALE_JWT_SECRET=" + s.JWTSecret,
		// The stack has no payment provider: its buyers pay themselves.
		"FLASHSALE_BUYER_PAY=true",
	}, append(redisEnv, o.Env...)...)

	if o.LeastPrivilege {
		if err := s.leastPrivilege(ctx); err != nil {
			return nil, err
		}
	}
	if err := Run(ctx, s.binary("worker"), append(s.env, s.roleEnv["worker"]...), "migrate"); err != nil {
		return nil, err
	}
	step("migrations applied (worker migrate)")
	if o.LeastPrivilege {
		if err := s.grant(); err != nil {
			return nil, err
		}
	}
	if s.DB, err = openDB(ctx, s.RootDSN); err != nil {
		return nil, err
	}
	var rc redis.UniversalClient = redis.NewClient(&redis.Options{Addr: redisAddr})
	switch {
	case s.Cluster != nil:
		rc = s.Cluster.Client()
	case s.Sentinel != nil:
		rc = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: SentinelMaster, SentinelAddrs: []string{redisAddr}})
	}
	if s.RDB, err = rdb.New(rc, o.Partitions, ""); err != nil {
		return nil, err
	}
	if err := s.StartGateway(ctx); err != nil {
		return nil, err
	}
	step("gateway up at " + s.URL)
	for i := range o.Workers {
		w, err := s.StartWorker(i)
		if err != nil {
			return nil, err
		}
		s.Workers = append(s.Workers, w)
	}
	switch {
	case o.Workers == 1:
		step("1 worker started")
	case o.Workers > 1:
		step(strconv.Itoa(o.Workers) + " workers started")
	}
	if o.Reaper {
		if s.Reaper, err = s.StartReaper(); err != nil {
			return nil, err
		}
		step("reaper started")
	} else if err := s.RDB.MarkAllLoaded(ctx); err != nil { // as a reaper's first pass would: unknown vouchers answer 404
		return nil, err
	}
	return s, nil
}

// StartReaper starts a reaper process, with env added to its environment.
func (s *Stack) StartReaper(env ...string) (*Proc, error) {
	return s.start("reaper", append(append([]string{"FLASHSALE_CONSUMER_NAME=reaper"}, s.opts.ReaperEnv...), env...))
}

// RestartReaper kills the reaper with SIGKILL and starts it again.
func (s *Stack) RestartReaper() error {
	s.Reaper.Kill()
	r, err := s.StartReaper()
	if err != nil {
		return err
	}
	s.Reaper = r
	return nil
}

// ReplaceWorker kills worker i with SIGKILL and starts a new one under a
// new consumer name, as a new pod would: what the old one left pending is
// the reaper's to take over.
func (s *Stack) ReplaceWorker(i int) error {
	s.Workers[i].Kill()
	s.restarts[i]++
	w, err := s.startWorkerAs(i, "worker-"+strconv.Itoa(i)+"-r"+strconv.Itoa(s.restarts[i]))
	if err != nil {
		return err
	}
	s.Workers[i] = w
	return nil
}

// leastPrivilege makes a Redis ACL user and an (as yet ungranted) MySQL
// user per role, and points each role's processes at them; migrations run
// as root through FLASHSALE_MIGRATE_DSN.
func (s *Stack) leastPrivilege(ctx context.Context) error {
	if s.Redis == nil || s.MariaDB == nil {
		return errors.New("LeastPrivilege needs throwaway servers")
	}
	s.roleEnv = map[string][]string{}
	rc := s.Redis.Client()
	defer rc.Close()
	for _, role := range db.GrantRoles() {
		user, pw := "flashsale_"+role, randomHex(16)
		rules, err := rdb.ACLRules(role)
		if err != nil {
			return err
		}
		// rules start with "reset", which would drop a password set before it.
		args := append([]any{"ACL", "SETUSER", user, rules[0], ">" + pw}, toAny(rules[1:])...)
		if err := rc.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("ACL SETUSER %s: %w", user, err)
		}
		dsn, err := testsrv.RoleUser(s.RootDSN, user, pw)
		if err != nil {
			return err
		}
		s.roleEnv[role] = []string{"FLASHSALE_REDIS_USERNAME=" + user, "FLASHSALE_REDIS_PASSWORD=" + pw,
			"FLASHSALE_MYSQL_DSN=" + dsn, "FLASHSALE_MIGRATE_DSN=" + s.RootDSN}
	}
	return nil
}

// RoleEnv is what a role's processes add to the stack's environment (its
// own users under LeastPrivilege; nothing otherwise).
func (s *Stack) RoleEnv(role string) []string { return s.roleEnv[role] }

// Var is the value the stack's processes are given for the variable
// name ("" when none).
func (s *Stack) Var(name string) string {
	for _, kv := range s.env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// grant gives each role's MySQL user its grants (the tables exist now).
func (s *Stack) grant() error {
	cfg, err := mysql.ParseDSN(s.RootDSN)
	if err != nil {
		return err
	}
	for _, role := range db.GrantRoles() {
		stmts, err := db.Grants(role, cfg.DBName, "'flashsale_"+role+"'@'%'")
		if err != nil {
			return err
		}
		if err := testsrv.ExecAll(s.RootDSN, stmts...); err != nil {
			return err
		}
	}
	return nil
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func openDB(ctx context.Context, dsn string) (*db.Store, error) {
	g, err := db.Open(ctx, dsn, db.Options{MaxOpenConns: 8})
	if err != nil {
		return nil, err
	}
	return db.New(g), nil
}

func (s *Stack) binary(name string) string { return filepath.Join(s.bin, name) }

// LogDir is where the processes log.
func (s *Stack) LogDir() string { return filepath.Join(s.opts.Dir, "logs") }

// StartGateway starts the gateway and waits until it answers HTTP.
func (s *Stack) StartGateway(ctx context.Context) error { return s.StartGatewayWith(ctx) }

// StartGatewayWith starts the gateway with env added (a Redis address
// through a proxy, say) and waits until it answers HTTP; stop the one
// running first.
func (s *Stack) StartGatewayWith(ctx context.Context, env ...string) error {
	p, err := s.start("gateway", env)
	if err != nil {
		return err
	}
	s.Gateway = p
	deadline := time.Now().Add(20 * time.Second)
	for {
		res, err := http.Get(s.URL + "/v1/orders/1")
		if err == nil {
			res.Body.Close()
			return nil
		}
		if p.Exited() || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("gateway did not come up: %v\n%s", err, p.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// StartGatewayIn starts one more gateway, inside network namespace n and
// listening on its address, with env added (e.g. a Redis address of its
// own), and returns it and its base URL.
func (s *Stack) StartGatewayIn(n *testsrv.Netns, env ...string) (*Proc, string, error) {
	var ports [3]int
	for i := range ports {
		p, err := testsrv.FreePort()
		if err != nil {
			return nil, "", err
		}
		ports[i] = p
	}
	addr := func(i int) string { return n.IP + ":" + strconv.Itoa(ports[i]) }
	env = append(append(append(append([]string{}, s.env...), s.roleEnv["gateway"]...), env...),
		"FLASHSALE_HTTP_ADDR="+addr(0), "FLASHSALE_OPS_ADDR="+addr(1), "FLASHSALE_PPROF_ADDR="+addr(2))
	ip, args := n.Command(s.binary("gateway"))
	p, err := Start("gateway-"+n.Name, ip, env, s.LogDir(), args...)
	if err != nil {
		return nil, "", err
	}
	s.extraGateways = append(s.extraGateways, p)
	p.OpsURL = "http://" + addr(1)
	url := "http://" + addr(0)
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := http.Get(p.OpsURL + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				if err = p.owns(ports[1]); err == nil {
					return p, url, nil
				}
			}
		}
		if p.Exited() || time.Now().After(deadline) {
			return nil, "", fmt.Errorf("gateway in %s did not come up: %v\n%s", n.Name, err, p.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// StartWorker starts worker i under the consumer name worker-i, so a
// restarted worker re-reads what its predecessor left pending.
func (s *Stack) StartWorker(i int) (*Proc, error) {
	return s.startWorkerAs(i, "worker-"+strconv.Itoa(i))
}

func (s *Stack) startWorkerAs(i int, name string) (*Proc, error) {
	for len(s.WorkerNames) <= i {
		s.WorkerNames = append(s.WorkerNames, "")
	}
	s.WorkerNames[i] = name
	return s.start(name, []string{"FLASHSALE_CONSUMER_NAME=" + name})
}

// StartWorkerWith starts a worker process under consumer name with env
// added (e.g. FLASHSALE_WORKER_BATCH_SIZE); the caller stops it.
func (s *Stack) StartWorkerWith(name string, env ...string) (*Proc, error) {
	return s.start("worker-"+name, append([]string{"FLASHSALE_CONSUMER_NAME=" + name}, env...))
}

// start starts a binary of the stack (its name before the first "-") with
// an ops listener on a port of its own: on other ports, up to three
// times, when another process took the ones found free.
func (s *Stack) start(name string, env []string) (*Proc, error) {
	var errs []error
	for range 3 {
		p, err := s.startOnce(name, env)
		if !errors.Is(err, errPortTaken) {
			return p, err
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// envPort is the port of the address the last name=host:port of env
// gives (0: none).
func envPort(env []string, name string) int {
	port := 0
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			_, p, _ := net.SplitHostPort(v)
			port, _ = strconv.Atoi(p)
		}
	}
	return port
}

// errPortTaken: the address a process was given answered, but from
// another process (of another test binary) that took the port first.
var errPortTaken = errors.New("its port was taken by another process")

func (s *Stack) startOnce(name string, env []string) (*Proc, error) {
	port, err := testsrv.FreePort()
	if err != nil {
		return nil, err
	}
	pport, err := testsrv.FreePort()
	if err != nil {
		return nil, err
	}
	bin, _, _ := strings.Cut(name, "-")
	addr, paddr := "127.0.0.1:"+strconv.Itoa(port), "127.0.0.1:"+strconv.Itoa(pport)
	env = append(append(append(append([]string{}, s.env...), s.roleEnv[bin]...), env...), "FLASHSALE_OPS_ADDR="+addr, "FLASHSALE_PPROF_ADDR="+paddr)
	p, err := Start(name, s.binary(bin), env, s.LogDir())
	if err != nil {
		return nil, err
	}
	p.OpsURL, p.PprofURL = "http://"+addr, "http://"+paddr
	// /livez answers once the process handles signals and has connected,
	// if the listener answering is its own.
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := http.Get(p.OpsURL + "/livez")
		if err == nil {
			res.Body.Close()
			if err = p.owns(port); err == nil && bin == "gateway" {
				if public := envPort(env, "FLASHSALE_HTTP_ADDR"); public != 0 {
					err = p.owns(public) // the buyers' address too
				}
			}
			if err == nil {
				return p, nil
			}
		}
		if errors.Is(err, errPortTaken) || p.Exited() || time.Now().After(deadline) {
			p.Kill()
			return nil, fmt.Errorf("%s did not come up: %w\n%s", name, err, p.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// RestartWorker kills worker i with SIGKILL and starts it again.
func (s *Stack) RestartWorker(i int) error {
	s.Workers[i].Kill()
	w, err := s.StartWorker(i)
	if err != nil {
		return err
	}
	s.Workers[i] = w
	return nil
}

// WaitBusy waits up to timeout until worker i holds entries it has not
// acknowledged (a batch in hand), and reports whether it did.
func (s *Stack) WaitBusy(ctx context.Context, i int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for p := range s.RDB.Partitions() {
			pend, err := s.RDB.Client().XPendingExt(ctx, &redis.XPendingExtArgs{Stream: rdb.StreamKey(p), Group: s.RDB.Group(),
				Start: "-", End: "+", Count: 1, Consumer: s.WorkerNames[i]}).Result()
			if err == nil && len(pend) > 0 {
				return true
			}
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

// Close stops the processes (SIGTERM, checking each exits cleanly) and the
// throwaway servers.
func (s *Stack) Close() error {
	var errs []error
	for _, g := range s.extraGateways {
		if !g.Exited() {
			errs = append(errs, g.Stop(20*time.Second))
		}
	}
	for _, n := range []*testsrv.Netns{s.RedisNet, s.MySQLNet} {
		if n != nil { // a test may leave a server cut off
			errs = append(errs, n.Heal())
		}
	}
	for _, w := range s.Workers {
		if !w.Exited() {
			errs = append(errs, w.Stop(15*time.Second))
		}
	}
	if s.Reaper != nil && !s.Reaper.Exited() {
		errs = append(errs, s.Reaper.Stop(15*time.Second))
	}
	if s.Gateway != nil && !s.Gateway.Exited() {
		errs = append(errs, s.Gateway.Stop(20*time.Second))
	}
	if s.RDB != nil {
		s.RDB.Client().Close()
	}
	if s.DB != nil {
		if sqlDB, err := s.DB.DB().DB(); err == nil {
			sqlDB.Close()
		}
	}
	if s.Cluster != nil {
		s.Cluster.Kill()
	}
	if s.Sentinel != nil {
		errs = append(errs, s.Sentinel.Kill())
	}
	if s.Replica != nil {
		errs = append(errs, s.Replica.Stop())
	}
	if s.Redis != nil {
		errs = append(errs, s.Redis.Stop())
	}
	if s.MariaDB != nil {
		errs = append(errs, s.MariaDB.Stop())
	}
	if s.RedisNet != nil { // once its servers are gone
		errs = append(errs, s.RedisNet.Close())
	}
	if s.MySQLNet != nil && s.MySQLNet != s.RedisNet {
		errs = append(errs, s.MySQLNet.Close())
	}
	return errors.Join(errs...)
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// KillVoucherMaster kills -9 the cluster master serving voucher's first
// bucket and waits (up to 30 s) until another node, its promoted replica,
// serves that slot. It returns the killed node, to start again, and how
// long the failover took.
func (s *Stack) KillVoucherMaster(ctx context.Context, voucher int64) (*testsrv.Redis, time.Duration, error) {
	return s.killVoucherMaster(ctx, voucher, 0)
}

// KillLaggingVoucherMaster is KillVoucherMaster after the master's
// replica has lagged for lag (testsrv.Cluster.StallReplicaOf): what the
// master admitted meanwhile is on no replica when it dies. Keep lag under
// the cluster's node timeout (2s), or the replica may be judged failed.
func (s *Stack) KillLaggingVoucherMaster(ctx context.Context, voucher int64, lag time.Duration) (*testsrv.Redis, time.Duration, error) {
	return s.killVoucherMaster(ctx, voucher, lag)
}

func (s *Stack) killVoucherMaster(ctx context.Context, voucher int64, lag time.Duration) (*testsrv.Redis, time.Duration, error) {
	if s.Cluster == nil {
		return nil, 0, fmt.Errorf("not a cluster")
	}
	parts, err := s.RDB.ReadVoucherPartitions(ctx, voucher)
	if err != nil {
		return nil, 0, err
	}
	key := rdb.StreamKey(parts[0])
	victim, err := s.Cluster.MasterOf(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	var replica *testsrv.Redis
	if lag > 0 {
		if victim, replica, err = s.Cluster.StallReplicaOf(ctx, key); err != nil {
			if replica != nil {
				_ = replica.Resume()
			}
			return nil, 0, err
		}
		time.Sleep(lag) // the sale goes on, its admissions on the master alone
	}
	if err := victim.Kill(); err != nil {
		return nil, 0, err
	}
	if replica != nil {
		if err := replica.Resume(); err != nil {
			return victim, 0, err
		}
	}
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.Cluster.WaitServed(wctx, key, victim.Addr); err != nil {
		return victim, 0, err
	}
	return victim, time.Since(start), nil
}

// startReplica starts a replica of master (host:port) in dir and waits
// until it is in sync.
func startReplica(dir, master string, extra ...string) (*testsrv.Redis, error) {
	host, port, err := net.SplitHostPort(master)
	if err != nil {
		return nil, err
	}
	r, err := testsrv.StartRedis(dir, append([]string{"--replicaof", host, port}, extra...)...)
	if err != nil {
		return nil, err
	}
	c := r.Client()
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := c.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return r, nil
		}
		if time.Now().After(deadline) {
			_ = r.Kill()
			return nil, fmt.Errorf("replica of %s not in sync after 30s: %v", master, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SentinelMaster is the master's name at the stack's sentinel.
const SentinelMaster = "flashsale"

// KillSentinelMaster kills the master of a sentinel stack (SIGKILL) and
// waits until the sentinel has promoted the replica; the killed server
// becomes s.Replica (stopped: Start brings it back, and the sentinel makes
// it the new master's replica) and the promoted one s.Redis.
func (s *Stack) KillSentinelMaster(ctx context.Context) (time.Duration, error) {
	if s.Sentinel == nil || s.Replica == nil {
		return 0, fmt.Errorf("not a sentinel stack")
	}
	if err := s.Redis.Kill(); err != nil {
		return 0, err
	}
	start := time.Now()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Sentinel.Addr})
	defer sc.Close()
	for {
		addr, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
		if err == nil && len(addr) == 2 && net.JoinHostPort(addr[0], addr[1]) == s.Replica.Addr {
			s.Redis, s.Replica = s.Replica, s.Redis
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return time.Since(start), fmt.Errorf("the sentinel did not promote %s: %w", s.Replica.Addr, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
