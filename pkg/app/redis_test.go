package app

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/internal/wait"
	"github.com/flashsale/flashsale/pkg/order"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
)

func common(addr string) Common {
	return Common{RedisAddr: addr, RedisTimeout: 2 * time.Second, StreamPartitions: 4, ConsumerGroup: rdb.DefaultGroup,
		MySQLDSN: "root@tcp(127.0.0.1:3306)/flashsale", MySQLMaxConns: 1, LogLevel: "info"}
}

// admitOnce puts a voucher on sale and admits one claim through s.
func admitOnce(t *testing.T, s *rdb.Store, v int64, user string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, s.EnsureGroups(ctx))
	now := time.Now()
	n, err := s.Client().Exists(ctx, fmt.Sprintf("flashsale:{p%d}:v:%d", s.PartitionOf(v), v)).Result()
	require.NoError(t, err)
	found := n == 1
	if !found {
		require.NoError(t, s.PutVoucher(ctx, rdb.Voucher{ID: v, Stock: 10, PerUserLimit: 1}))
	}
	_, err = testrdb.Admitter(s).Admit(ctx, admission.Claim{VoucherID: v, UserID: user, Now: now, Day: order.Day(now, time.UTC)})
	require.NoError(t, err)
}

// A Redis speaking TLS only, with a CA made in the test: trusted through
// FLASHSALE_REDIS_TLS_CA_FILE, refused without it or under another name.
func TestRedisOverTLS(t *testing.T) {
	dir := t.TempDir()
	files, err := testsrv.MakeTLS(dir)
	require.NoError(t, err)
	srv, err := testsrv.StartRedisTLS(dir+"/redis", files)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Kill() })
	ctx := context.Background()

	c := common(srv.Addr)
	c.RedisTLS, c.RedisTLSCAFile = true, files.CA
	require.NoError(t, c.Validate())
	s, err := c.Redis(ctx, 4)
	require.NoError(t, err)
	defer s.Client().Close()
	admitOnce(t, s, 1, "alice")

	c.RedisTLSServerName = "redis.test"
	s2, err := c.Redis(ctx, 4)
	require.NoError(t, err, "the certificate's DNS name")
	s2.Client().Close()

	c.RedisTLSServerName = "elsewhere.test"
	_, err = c.Redis(ctx, 4)
	require.Error(t, err, "a name the certificate does not hold")
	plain := common(srv.Addr)
	plain.RedisTLS = true // the system's CAs: not ours
	_, err = plain.Redis(ctx, 4)
	require.Error(t, err)
	noTLS := common(srv.Addr)
	_, err = noTLS.Redis(ctx, 4)
	require.Error(t, err, "plain TCP to a TLS port")
}

// A cluster client over seed addresses: the partitions' keys spread over
// the masters, and an admission works wherever its partition lives.
func TestRedisCluster(t *testing.T) {
	cl := testsrv.NewCluster(t, 3)
	c := common(strings.Join(cl.Addrs(), ","))
	c.RedisCluster = true
	require.NoError(t, c.Validate())
	s, err := c.Redis(context.Background(), 4)
	require.NoError(t, err)
	defer s.Client().Close()
	_, ok := s.Client().(*redis.ClusterClient)
	require.True(t, ok)
	for v := int64(1); v <= 4; v++ {
		admitOnce(t, s, v, "alice")
	}
	c.RedisDB = 1
	require.ErrorContains(t, c.Validate(), "FLASHSALE_REDIS_DB")
}

// Through sentinels: the client finds the master, and after a failover
// (the replica promoted) it finds the new one; what was admitted before
// is there.
func TestRedisSentinelFailover(t *testing.T) {
	dir := t.TempDir()
	master := testsrv.NewRedis(t)
	replica, err := testsrv.StartRedis(dir+"/replica", "--replicaof", "127.0.0.1", strings.Split(master.Addr, ":")[1])
	require.NoError(t, err)
	t.Cleanup(func() { _ = replica.Kill() })
	sentinel, err := testsrv.StartSentinel(dir+"/sentinel", "flashsale", master.Addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sentinel.Kill() })
	ctx := context.Background()

	c := common(sentinel.Addr)
	c.RedisSentinelMaster = "flashsale"
	require.NoError(t, c.Validate())
	s, err := c.Redis(ctx, 4)
	require.NoError(t, err)
	defer s.Client().Close()
	admitOnce(t, s, 1, "before")

	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr})
	defer sc.Close()
	// The replica must have caught up and be known to the sentinel.
	wait.For(t, 30*time.Second, "the sentinel to know the replica, in sync", func() bool {
		replicas, err := sc.Replicas(ctx, "flashsale").Result()
		return err == nil && len(replicas) == 1 && replicas[0]["flags"] == "slave"
	})
	wait.For(t, 30*time.Second, "replicated", func() bool {
		n, _, err := s.RemainingStock(ctx, 1)
		rc := replica.Client()
		defer rc.Close()
		m, err2 := rc.HGet(ctx, "flashsale:{p1}:v:1", "stock").Int64()
		return err == nil && err2 == nil && m == n
	})
	require.NoError(t, sc.Failover(ctx, "flashsale").Err())
	wait.For(t, 30*time.Second, "the replica promoted", func() bool {
		addr, err := sc.GetMasterAddrByName(ctx, "flashsale").Result()
		return err == nil && addr[0]+":"+addr[1] == replica.Addr
	})

	// The client follows; its first commands may meet the old master
	// turned replica (READONLY) or a closed connection: callers retry.
	wait.For(t, 30*time.Second, "admitting on the new master", func() bool {
		now := time.Now()
		_, err := testrdb.Admitter(s).Admit(ctx, admission.Claim{VoucherID: 1, UserID: "after", Now: now, Day: order.Day(now, time.UTC)})
		return err == nil
	})
	n, _, err := s.RemainingStock(ctx, 1)
	require.NoError(t, err)
	require.EqualValues(t, 8, n, "the admission made before the failover survived it")
}
