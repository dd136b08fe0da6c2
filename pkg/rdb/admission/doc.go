// Package admission decides claims in Redis: the gateway's path to a 202.
// An Admitter sends each claim as a line of a call of lua/admit.lua, the
// claims of one bucket in one call, the calls of a round trip pipelined
// (admit.go); a Batcher coalesces concurrent claims into such round trips
// (batcher.go); a claim its call found in a dry bucket, or whose user was
// moving in a split, is decided again off the pipelines (detour.go); and
// the outcome of a claim whose caller stopped waiting is recorded for its
// buyer to ask for (outcome.go). What the claim's path shares with the
// other clients of Redis (the keys, a user's bucket, the moves of units
// between buckets, the durability, the refusals' codes) is pkg/rdb's.
//
// # The admission script
//
// lua/admit.lua decides a batch of claims of one bucket in one call: its
// header is its contract (KEYS, ARGV, the claim line, effects, replies).
// It is one script because the decision must be atomic (the stock, the
// user's counts, the idempotency record and the stream entry change
// together or not at all), and one call for a batch because a call's
// round trip and Redis's dispatch are most of a claim's cost. Every key
// it touches carries its bucket's partition's hash tag, so it runs
// unchanged on a Redis Cluster, on that slot's master.
//
// What a call costs Redis's one thread: every redis.call is a few
// microseconds, and so is the script call itself; a batch shares them.
// The common batch (units, no daily limit, no idempotency keys) makes one
// HMGET of the voucher and every user's count and index, one XADD and
// one INCRBY a 32 admissions, and one HSET of the new stock, counts and
// indexes. A daily limit adds one HMGET and one HSET (and EXPIRE) a day;
// keys add one MGET and a SET a keyed admission; a pool an LPOP an
// admission; a proof-of-work gate a SET a claim; a waiting room an HSETNX
// an admission (and an HINCRBY the first time a pass buys).
// docs/BENCHMARKS.md measures it (go run ./pkg/internal/cmd/scriptcost).
package admission
