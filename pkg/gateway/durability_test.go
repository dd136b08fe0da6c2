package gateway_test

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/flashsale/flashsale/pkg/app"
	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	"github.com/flashsale/flashsale/pkg/persist"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// failoverResult is what a sale through a failover to a lagging replica
// gave: the orders answered 202, those of them MySQL never got, and the
// claims answered 503 while the replica lagged.
type failoverResult struct {
	admitted, lost []string
	stalled503     int
}

// laggingTopology is a Redis deployment with a replica whose replication
// a test can stall, and whose master it can kill so that the replica (the
// one that lags) is promoted.
type laggingTopology struct {
	common app.Common
	// stall stops the replica of the master holding key from receiving
	// the master's writes; fail kills that master (SIGKILL) and returns
	// once its replica serves the key.
	stall, fail func(key string)
}

// sentinelTopology is a master with one replica and a sentinel (quorum
// one); the replica's link goes through toxiproxy, which stalls it.
func sentinelTopology(t *testing.T) laggingTopology {
	ctx := context.Background()
	dir := t.TempDir()
	master, err := testsrv.StartRedis(dir + "/master")
	require.NoError(t, err)
	t.Cleanup(func() { _ = master.Kill() })
	link := testsrv.NewProxy(t, master.Addr) // the replica's replication link
	host, port, _ := net.SplitHostPort(link.Addr)
	replica, err := testsrv.StartRedis(dir+"/replica", "--replicaof", host, port)
	require.NoError(t, err)
	t.Cleanup(func() { _ = replica.Kill() })
	// A long failover-timeout: the sentinel would otherwise point the
	// replica at the master itself, around the proxy, after 5-10 s.
	sentinel, err := testsrv.StartSentinel(dir+"/sentinel", "flashsale", master.Addr, 2*time.Minute)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sentinel.Kill() })
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr})
	t.Cleanup(func() { sc.Close() })
	testenv.Eventually(t, 30*time.Second, "the sentinel sees the replica in sync", func() bool {
		replicas, err := sc.Replicas(ctx, "flashsale").Result()
		return err == nil && len(replicas) == 1 && replicas[0]["flags"] == "slave" && replicas[0]["master-link-status"] == "ok"
	})
	return laggingTopology{
		common: app.Common{RedisAddr: sentinel.Addr, RedisSentinelMaster: "flashsale"},
		stall:  func(string) { require.NoError(t, link.Stall()) },
		fail: func(string) {
			require.NoError(t, master.Kill())
			testenv.Eventually(t, 60*time.Second, "the sentinel promotes the replica", func() bool {
				addr, err := sc.GetMasterAddrByName(ctx, "flashsale").Result()
				return err == nil && addr[0]+":"+addr[1] == replica.Addr
			})
		},
	}
}

// clusterTopology is a Redis Cluster of three masters with a replica each,
// which fails over on its own; the replica lags by Cluster.StallReplicaOf
// (stopped, and the master's output buffer filled before the claims).
func clusterTopology(t *testing.T) laggingTopology {
	ctx := context.Background()
	cluster, err := testsrv.StartClusterWithReplicas(t.TempDir(), 3, 1)
	require.NoError(t, err)
	t.Cleanup(cluster.Kill)
	var master, replica *testsrv.Redis
	return laggingTopology{
		common: app.Common{RedisAddr: strings.Join(cluster.Addrs(), ","), RedisCluster: true},
		stall: func(key string) {
			master, replica, err = cluster.StallReplicaOf(ctx, key)
			require.NoError(t, err)
		},
		fail: func(key string) {
			require.NoError(t, master.Kill())
			require.NoError(t, replica.Resume())
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			require.NoError(t, cluster.WaitServed(wctx, key, master.Addr), "the cluster promotes the replica")
		},
	}
}

// saleThroughLaggingFailover runs a sale on topo: claims while the replica
// is in sync, then claims while its replication is stalled, then the
// master is killed (SIGKILL) and the replica that lags is promoted. The
// workers then persist what the new master holds.
func saleThroughLaggingFailover(t *testing.T, durability string, topo laggingTopology) failoverResult {
	ctx := context.Background()
	mysql := testenv.New(t, 2)
	c := topo.common
	c.RedisTimeout, c.StreamPartitions, c.ConsumerGroup, c.MySQLDSN = 2*time.Second, 2, rdb.DefaultGroup, mysql.Common.MySQLDSN
	rs, err := c.Redis(ctx, 16)
	require.NoError(t, err)
	t.Cleanup(func() { rs.Client().Close() })
	require.NoError(t, rs.Load(ctx))
	require.NoError(t, rs.EnsureGroups(ctx))
	env := &testenv.Env{Common: c, RDB: rs, DB: mysql.DB}
	f := newFixtureOn(t, env, gateway.Config{RedisDurability: durability, ClaimTimeout: time.Second})
	id := f.createVoucher(`{"name":"d","stock":100}`)
	key := rdb.StreamKey(rs.PartitionOf(parseID(t, id)))

	var res failoverResult
	claim := func(user string) response {
		r := f.do("POST", "/v1/vouchers/"+id+"/orders", f.token(user), "")
		if r.Status == http.StatusAccepted {
			res.admitted = append(res.admitted, r.Body["order_id"].(string))
		}
		return r
	}
	for i := range 5 {
		require.Equal(t, http.StatusAccepted, claim("in-sync-"+strconv.Itoa(i)).Status)
	}
	// A replay under an Idempotency-Key answers the first admission; with
	// replica it waits for the replicas too (its first write was on
	// another connection).
	first := f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("keyed"), "", "Idempotency-Key", "k")
	require.Equal(t, http.StatusAccepted, first.Status, first.Raw)
	res.admitted = append(res.admitted, first.Body["order_id"].(string))
	again := f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("keyed"), "", "Idempotency-Key", "k")
	require.Equal(t, http.StatusAccepted, again.Status, again.Raw)
	require.Equal(t, first.Body["order_id"], again.Body["order_id"])
	topo.stall(key)
	for i := range 10 {
		r := claim("stalled-" + strconv.Itoa(i))
		switch durability {
		case rdb.DurabilityNone:
			require.Equal(t, http.StatusAccepted, r.Status, r.Raw)
		default:
			// Admitted on the master, not known to survive it: its
			// outcome is unknown until the failover settles it.
			requireError(t, r, http.StatusServiceUnavailable, "outcome_unknown")
			require.NotEmpty(t, r.Body["claim_id"], r.Raw)
			res.stalled503++
		}
	}
	if durability != rdb.DurabilityNone {
		// An operator's write waits the same way.
		requireError(t, f.do("POST", "/admin/v1/vouchers/"+id+"/pause", admin, ""), http.StatusServiceUnavailable, "unavailable")
	}
	topo.fail(key)

	// The workers persist what the new master holds (the client follows
	// the failover; its first commands may meet a closed connection).
	w := persist.NewOrders(persist.Config{Consumer: "w"}, rs, mysql.DB, zaptest.NewLogger(t), nil, nil)
	testenv.Eventually(t, 30*time.Second, "the new master's stream persisted", func() bool {
		for p := range 2 {
			entries, err := rs.ReadGroup(ctx, p, "w", "0", 100, 0)
			if err == nil && len(entries) == 0 {
				entries, err = rs.ReadGroup(ctx, p, "w", ">", 100, 10*time.Millisecond)
			}
			if err != nil || len(entries) > 0 && w.Handle(ctx, entries) != nil {
				return false
			}
			if b, err := rs.PartitionBacklog(ctx, p); err != nil || b.Length > 0 {
				return false
			}
		}
		return true
	})
	for _, o := range res.admitted {
		if mysql.Count(t, "SELECT COUNT(*) FROM orders WHERE id = ?", o) == 0 {
			res.lost = append(res.lost, o)
		}
	}
	t.Logf("%s: %d answered 202, %d of them lost in the failover, %d answered 503 while the replica lagged: %s",
		durability, len(res.admitted), len(res.lost), res.stalled503, strings.Join(res.lost, " "))
	return res
}

// A failover to a replica that lagged loses the 202s the old
// master gave (with durability none: the test shows it can fail), and
// loses none with durability replica, whose claims answer 503 while the
// replica lags; through a sentinel and through a cluster's own failover.
func TestAFailoverToALaggingReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("a failover takes seconds")
	}
	for name, topo := range map[string]func(*testing.T) laggingTopology{"sentinel": sentinelTopology, "cluster": clusterTopology} {
		t.Run(name+"/none loses 202s", func(t *testing.T) {
			t.Parallel() // most of it waits on a failover: the four wait together, two at a time
			res := saleThroughLaggingFailover(t, rdb.DurabilityNone, topo(t))
			require.Len(t, res.admitted, 16)
			require.Len(t, res.lost, 10, "every 202 the stalled replica never got is lost")
		})
		t.Run(name+"/replica loses none", func(t *testing.T) {
			t.Parallel() // most of it waits on a failover: the four wait together, two at a time
			res := saleThroughLaggingFailover(t, rdb.DurabilityReplica, topo(t))
			require.Len(t, res.admitted, 6)
			require.Empty(t, res.lost)
			require.Equal(t, 10, res.stalled503)
		})
	}
}

// Bad durability (and webhook) settings exit at start, naming the variable; replica_aof
// is refused by a server without WAITAOF (Redis before 7.2).
func TestDurabilitySettingsAreChecked(t *testing.T) {
	for name, tt := range map[string]struct {
		cfg  gateway.Config
		want string
	}{
		"unknown mode":               {gateway.Config{RedisDurability: "quorum"}, "FLASHSALE_REDIS_DURABILITY"},
		"no replicas":                {gateway.Config{RedisDurability: "replica", RedisMinReplicas: -1}, "FLASHSALE_REDIS_MIN_REPLICAS"},
		"wait longer than claims":    {gateway.Config{RedisDurability: "replica", RedisWaitTimeout: time.Second, ClaimTimeout: 300 * time.Millisecond}, "FLASHSALE_REDIS_WAIT_TIMEOUT"},
		"webhook tolerance of a day": {gateway.Config{PaymentWebhookSecret: webhookSecret, PaymentWebhookTolerance: 24 * time.Hour}, "FLASHSALE_PAYMENT_WEBHOOK_TOLERANCE"},
	} {
		t.Run(name, func(t *testing.T) {
			tt.cfg.AdminToken, tt.cfg.JWTSecret = admin, secret
			_, err := gateway.New(tt.cfg, nil, nil, nil)
			require.ErrorContains(t, err, tt.want)
		})
	}

	r := testsrv.NewRedis(t)
	s, err := rdb.New(r.Client(), 1, "")
	require.NoError(t, err)
	require.NoError(t, s.SetDurability(rdb.Durability{Mode: rdb.DurabilityReplicaAOF, MinReplicas: 1, Timeout: 100 * time.Millisecond}))
	info, err := r.Client().Info(context.Background(), "server").Result()
	require.NoError(t, err)
	if !strings.Contains(info, "redis_version:7.0.") && !strings.Contains(info, "redis_version:7.1.") {
		t.Skip("this redis-server has WAITAOF")
	}
	require.ErrorContains(t, s.CheckDurability(context.Background()), "Redis 7.2 or later")
}
