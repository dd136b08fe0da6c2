package rdb

import (
	"fmt"
	"slices"
	"strings"
)

// Redis ACL users, one per role: each may run only the commands its role
// sends (scripts included: Redis checks the commands a script calls
// against the caller's ACL) and only on flashsale's keys. docs/SECURITY.md
// lists these rules; the end-to-end test runs every role under its user
// (TestEndToEndSaleUnderLeastPrivilege).
var roleCommands = map[string][]string{
	// Claims (admit.lua), vouchers put on sale (WATCH, MULTI: created
	// once), operators' changes (change.lua), order and voucher
	// reads, the consumer groups it makes sure of at start, moving units
	// between a hot voucher's buckets (take.lua, give.lua, the moves read
	// and forgotten), WAIT with a durability set, and TIME with a claim's
	// outcome record (outcome.lua).
	"gateway": {
		"evalsha", "eval", "script|load", "get", "mget", "set", "hmget", "hget", "hgetall", "hset", "hdel", "hincrby", "incrby", "lpop", "lpush", "rpush",
		"xadd", "xdel", "xrange", "xlen", "xpending", "xgroup|create", "expire", "expireat", "persist", "del", "exists", "sadd", "sismember", "watch", "unwatch", "multi", "exec",
		"wait", "time",
	},
	// Reading and acknowledging (ack.lua), renewing its lease (lease.lua)
	// and its liveness key, releasing (release.lua) and dead-lettering.
	"worker": {
		"evalsha", "eval", "script|load", "xreadgroup", "xack", "xdel", "xclaim", "xadd", "xgroup|create", "xrange",
		"xpending", "xinfo|groups", "xtrim", "xlen", "decrby", "get", "set", "del", "exists", "sadd", "hmget", "hget", "hincrby", "lpush", "expireat", "multi", "exec",
	},
	// The worker's, and taking over (XAUTOCLAIM), removing consumers
	// (delconsumer.lua), closing pools, the stream gauges, dead-letter
	// trimming, the creations and changes Redis missed, reconcile
	// --repair, the users' indexes trimmed after a sale (HSCAN), the
	// releases forgotten (forget.lua) and the splits of a voucher's
	// buckets (split.lua; SCAN finds a bucket's day hashes, keys and
	// proofs, PTTL their expiry; TIME and XINFO STREAM date the start of
	// a pre-copy, LRANGE, LINDEX and LLEN read its dirty lists, UNLINK drops
	// them), and the moves between buckets forgotten (forgetmoves.lua;
	// SSCAN reads a bucket's moves given), and WAIT, with a durability
	// set, before an envelope sale's refund.
	"reaper": {
		"evalsha", "eval", "script|load", "xreadgroup", "xack", "xdel", "xclaim", "xautoclaim", "xadd", "xgroup|create",
		"xgroup|delconsumer", "xpending", "xinfo|groups", "xinfo|consumers", "xlen", "xrange", "xtrim",
		"decrby", "exists", "sadd", "srem", "scard", "smembers", "sismember", "hmget", "hget", "hgetall", "hscan", "hset", "hsetnx", "hdel", "hincrby", "lpush", "rpush", "lrange",
		"expire", "expireat", "pexpire", "pttl", "scan", "persist", "del", "get", "set", "watch", "unwatch", "multi", "exec",
		"lindex", "llen", "time", "xinfo|stream", "unlink", "sscan", "wait",
	},
	// Read-only: the stream gauges and looking at state (a metrics
	// exporter, an operator's redis-cli).
	"metrics": {"get", "xlen", "xinfo|groups", "xinfo|consumers", "xinfo|stream", "xpending", "xrange", "hmget", "hget", "hgetall", "lrange", "scard", "smembers", "sismember", "exists", "ttl"},
}

// aclConnection is what every client needs besides its role's commands:
// health checks, a database other than 0, and a cluster client's view of
// the slots. HELLO and AUTH need no rule;
// go-redis's CLIENT SETINFO (Redis 7.2+) may be refused, which it ignores,
// and naming it would make the rules fail on Redis 7.0, which lacks it.
var aclConnection = []string{"ping", "select", "cluster|slots", "cluster|shards"}

// ACLRoles are the roles that have an ACL user.
func ACLRoles() []string {
	roles := make([]string, 0, len(roleCommands))
	for r := range roleCommands {
		roles = append(roles, r)
	}
	slices.Sort(roles)
	return roles
}

// ACLRules are the ACL SETUSER rules of role's user (without the user's
// name and password): deny by default, flashsale's keys only, no pub/sub.
func ACLRules(role string) ([]string, error) {
	cmds, ok := roleCommands[role]
	if !ok {
		return nil, fmt.Errorf("no ACL role %q (one of %s)", role, strings.Join(ACLRoles(), ", "))
	}
	rules := []string{"reset", "on", "resetchannels", "~flashsale:*", "-@all"}
	for _, c := range append(slices.Clone(aclConnection), cmds...) {
		rules = append(rules, "+"+c)
	}
	return rules, nil
}
