package testsrv

import (
	"context"
	"fmt"
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
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
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
	c := &Cluster{}
	for i := range masters {
		n, err := StartRedis(filepath.Join(dir, fmt.Sprintf("node%d", i)),
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
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
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
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
	return c, nil
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
