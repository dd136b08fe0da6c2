package testsrv

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a throwaway Redis Cluster of masters on loopback, made with
// redis-server --cluster-enabled and redis-cli --cluster create.
type Cluster struct {
	Nodes []*Redis
}

// Addrs are the nodes' host:port.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return out
}

// Client returns a cluster client over every node.
func (c *Cluster) Client() *redis.ClusterClient {
	// The map of slots is read every second (go-redis's default is a
	// minute), so the client follows a failover as the binaries do; a
	// context's deadline bounds a read, as the binaries' clients have it
	// (app.Common), so a hung node holds a caller no longer than that.
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ClusterStateReloadInterval: time.Second,
		ContextTimeoutEnabled: true})
}

// WaitOK waits until every node says cluster_state:ok (after a node that
// was stopped or killed is back), or ctx ends.
func (c *Cluster) WaitOK(ctx context.Context) error {
	for _, n := range c.Nodes {
		for {
			rc := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
			info, err := rc.ClusterInfo(ctx).Result()
			rc.Close()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("cluster not ok: %v %s: %w", err, info, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// Kill kills every node.
func (c *Cluster) Kill() {
	for _, n := range c.Nodes {
		_ = n.Kill()
	}
}

// StartCluster starts masters nodes in dir and joins them into a cluster
// whose slots are all served.
func StartCluster(dir string, masters int) (*Cluster, error) {
	return StartClusterWithReplicas(dir, masters, 0)
}

// StartClusterWithReplicas is StartCluster with replicas replicas of each
// master (asynchronous replication, as Redis Cluster has it): a killed
// master's replica is promoted once the others see it fail.
func StartClusterWithReplicas(dir string, masters, replicas int) (*Cluster, error) {
	return startCluster(dir, masters, replicas, nil)
}

// StartClusterIn is StartClusterWithReplicas with the first node, a
// master, in network namespace ns: cutting ns cuts that master off from
// the clients, the other nodes and its replica. The other nodes listen
// and announce themselves at ns.Gateway, which both sides reach.
func StartClusterIn(ns *Netns, dir string, masters, replicas int) (*Cluster, error) {
	c, err := startCluster(dir, masters, replicas, ns)
	if err != nil {
		return nil, err
	}
	// redis-cli spreads masters over addresses, so the lone node at its
	// own address is a master; if not, it takes over from its master.
	rc := c.Nodes[0].Client()
	defer rc.Close()
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		role, err := rc.Do(ctx, "ROLE").Slice()
		if err == nil && len(role) > 0 && role[0] == "master" {
			return c, c.WaitOK(ctx)
		}
		if time.Now().After(deadline) {
			c.Kill()
			return nil, fmt.Errorf("node %s not a master after 30s: %v", c.Nodes[0].Addr, err)
		}
		_ = rc.Do(ctx, "CLUSTER", "FAILOVER").Err()
		time.Sleep(500 * time.Millisecond)
	}
}

func startCluster(dir string, masters, replicas int, ns *Netns) (*Cluster, error) {
	c := &Cluster{}
	for i := range masters * (1 + replicas) {
		args := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"}
		var (
			n   *Redis
			err error
		)
		switch {
		case ns != nil && i == 0:
			n, err = StartRedisIn(ns, filepath.Join(dir, fmt.Sprintf("node%d", i)), append(args, "--cluster-announce-ip", ns.IP)...)
		case ns != nil:
			n, err = StartRedis(filepath.Join(dir, fmt.Sprintf("node%d", i)),
				append(args, "--bind", "127.0.0.1", ns.Gateway, "--cluster-announce-ip", ns.Gateway, "--protected-mode", "no")...)
			if n != nil { // the address the cluster gives for it
				_, port, _ := net.SplitHostPort(n.Addr)
				n.Addr = net.JoinHostPort(ns.Gateway, port)
			}
		default:
			n, err = StartRedis(filepath.Join(dir, fmt.Sprintf("node%d", i)), args...)
		}
		if err != nil {
			c.Kill()
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		c.Kill()
		return nil, fmt.Errorf("redis-cli not found (Debian package redis-tools): %w", err)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", fmt.Sprint(replicas), "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		c.Kill()
		return nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	// Every node must see every slot served before clients use it.
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range c.Nodes {
		for {
			rc := redis.NewClient(&redis.Options{Addr: n.Addr})
			info, err := rc.ClusterInfo(context.Background()).Result()
			rc.Close()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				c.Kill()
				return nil, fmt.Errorf("cluster not ok after 30s: %v %s", err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Replicas must hold the data before a master is killed.
	for _, n := range c.Nodes {
		for {
			rc := redis.NewClient(&redis.Options{Addr: n.Addr})
			info, err := rc.Info(context.Background(), "replication").Result()
			rc.Close()
			if err == nil && (strings.Contains(info, "role:master") || strings.Contains(info, "master_link_status:up")) {
				break
			}
			if time.Now().After(deadline) {
				c.Kill()
				return nil, fmt.Errorf("replica %s not in sync after 30s: %v %s", n.Addr, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c, nil
}

// MasterOf is the node serving key's slot now.
func (c *Cluster) MasterOf(ctx context.Context, key string) (*Redis, error) {
	cc := c.Client()
	defer cc.Close()
	n, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return nil, err
	}
	for _, r := range c.Nodes {
		if r.Addr == n.Options().Addr {
			return r, nil
		}
	}
	return nil, fmt.Errorf("no node %s", n.Options().Addr)
}

// StallReplicaOf makes the replica of key's master lag: it is stopped
// (SIGSTOP), and the master given 64 MB to replicate, so the replica's
// socket buffers fill and what the master writes next stays in its own
// output buffer (lost if the master is killed). A cluster replica
// connects to the address its master announces, which clients use too,
// so no proxy can stall that link alone. Resume the replica to end it.
func (c *Cluster) StallReplicaOf(ctx context.Context, key string) (master, replica *Redis, err error) {
	if master, err = c.MasterOf(ctx, key); err != nil {
		return nil, nil, err
	}
	_, port, _ := net.SplitHostPort(master.Addr)
	for _, n := range c.Nodes {
		rc := n.Client()
		info, err := rc.Info(ctx, "replication").Result()
		rc.Close()
		if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_port:"+port+"\r\n") {
			replica = n
		}
	}
	if replica == nil {
		return master, nil, fmt.Errorf("no replica of %s", master.Addr)
	}
	if err := replica.Pause(); err != nil {
		return master, replica, err
	}
	mc := master.Client()
	defer mc.Close()
	return master, replica, mc.Set(ctx, key+":ballast", strings.Repeat("x", 64<<20), time.Hour).Err()
}

// FailoverOf hands key's slot from its master to that master's replica
// with CLUSTER FAILOVER (an operator's failover: the replica takes over
// once it has every write), and waits until the replica serves it. It
// returns the old master's address.
func (c *Cluster) FailoverOf(ctx context.Context, key string) (string, error) {
	master, err := c.MasterOf(ctx, key)
	if err != nil {
		return "", err
	}
	_, port, _ := net.SplitHostPort(master.Addr)
	for _, n := range c.Nodes {
		rc := n.Client()
		info, err := rc.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_port:"+port+"\r\n") {
			err = rc.Do(ctx, "CLUSTER", "FAILOVER").Err()
			rc.Close()
			if err != nil {
				return master.Addr, err
			}
			return master.Addr, c.WaitServed(ctx, key, master.Addr)
		}
		rc.Close()
	}
	return master.Addr, fmt.Errorf("no replica of %s", master.Addr)
}

// WaitServed waits until a node other than gone serves key's slot as a
// master and accepts writes there (after a failover), or ctx ends.
func (c *Cluster) WaitServed(ctx context.Context, key, gone string) error {
	for {
		for _, r := range c.Nodes {
			if r.Addr == gone {
				continue
			}
			rc := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
			role, _ := rc.Do(ctx, "ROLE").Slice()
			slot, _ := rc.ClusterKeySlot(ctx, key).Result()
			var serves bool
			if len(role) > 0 && role[0] == "master" {
				slots, _ := rc.ClusterSlots(ctx).Result()
				for _, s := range slots {
					if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 && s.Nodes[0].Addr == r.Addr {
						serves = true
					}
				}
			}
			rc.Close()
			if serves {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no master serves %s after %s failed: %w", key, gone, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// NewCluster is StartCluster for a test, stopped at its end.
func NewCluster(tb testing.TB, masters int) *Cluster {
	tb.Helper()
	c, err := StartCluster(tb.TempDir(), masters)
	if err != nil {
		tb.Fatalf("start redis cluster: %v", err)
	}
	tb.Cleanup(c.Kill)
	return c
}

// redisCluster is the flag -redis-cluster of the test binaries whose
// TestMain is MainMaybeOnCluster.
var redisCluster = flag.Bool("redis-cluster", false, "run the package's Redis tests against a Redis Cluster of 3 masters")

// MainMaybeOnCluster is a package's TestMain whose Redis tests can run
// against one redis-server or, with -redis-cluster (make test runs both,
// as asynq's test setup does), a Redis Cluster of three masters started
// first: *cluster holds it during the tests (nil without the flag), and it
// is stopped after them.
func MainMaybeOnCluster(m *testing.M, cluster **Cluster) {
	flag.Parse()
	if !*redisCluster {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "flashsale-cluster-")
	if err == nil {
		*cluster, err = StartCluster(dir, 3)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	(*cluster).Kill()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}
