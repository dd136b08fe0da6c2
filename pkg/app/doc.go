// Package app is the wiring the flashsale binaries share: common
// configuration, the logger, the Redis and MySQL connections, the migrate
// subcommand and the process lifecycle. Configuration is read with
// envconfig in cmd/ only; this package receives it.
//
// # Redis deployments
//
// One constructor (app.Common.redisClient) makes the client every role
// uses, a go-redis UniversalClient: a single server, a Redis Cluster
// client over seed addresses (FLASHSALE_REDIS_CLUSTER), or a client that
// asks sentinels for the master (FLASHSALE_REDIS_SENTINEL_MASTER), with an
// ACL user and TLS as configured. go-redis never retries a command on its
// own (a command Redis ran but whose reply was lost must not run twice
// unseen); every caller has its own retry.
//
// On a cluster nothing changes in flashsale: each script, each MULTI and
// each pipeline keeps to one partition's hash tag, so to one slot; the
// partitions' streams and vouchers spread over the masters; a worker reads
// each partition with its own XREADGROUP (one key each, as a cluster
// requires), one reader per partition. The rdb package's tests run on a
// three-master cluster as well as on one server, and an end-to-end sale
// runs on the cluster (TestEndToEndSaleOnARedisCluster), a hot voucher
// over three buckets among its vouchers. A master killed mid-sale, its
// replica promoted, is TestSaleSurvivesAClusterMasterFailover
// (docs/FAILURES.md has a run). What asynchronous replication can lose
// there, with FLASHSALE_REDIS_DURABILITY=none (the default; replica waits
// for a replica before each 202), is the writes the master acknowledged
// and had not yet sent: 202s whose stream entries never reach a worker,
// and counts a claim just changed. MySQL's own checks (the conditional stock update, the per-user
// limit counted in the batch) still refuse an oversold or over-limit order,
// and reaper reconcile --repair rewrites Redis from MySQL; the lost 202s
// themselves are not recovered by anything in flashsale.
//
// A cluster client follows a failover by rereading the map of slots: the
// binaries reread it every 2 s and at once when a node cannot be dialled
// (go-redis's own default is once a minute, and on a MOVED answer, which a
// dead master never gives). The gateway's batcher sends each master's
// claims in a pipeline of their own: a cluster pipeline returns when its
// slowest node does, and a dead master would otherwise hold up every
// claim batched with its own.
package app
