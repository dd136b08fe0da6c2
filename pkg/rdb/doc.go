// Package rdb owns flashsale's Redis state: every key (keys.go), every
// script call and the formats of what the streams hold go through a Store.
// Its parts that serve one client work through a Store, each in a package
// of its own: the claim's path, the gateway's, is pkg/rdb/admission; the
// streams' upkeep (taking over, dead letters, gauges) is pkg/rdb/upkeep;
// and a voucher's split into more buckets while it sells, the reaper's, is
// pkg/rdb/split. What they share is here: the keys, the bucket a user's
// claims are decided in and the moves of units between buckets
// (buckets.go), what a write must reach before it is done
// (durability.go), the streams, a voucher's keys written and changed. The names of a bucket's keys, which all
// of them use, are pkg/rdb/internal/keyspace's.
//
// # A hot voucher over several masters
//
// With stock_buckets N > 1 a voucher's stock is split over N buckets.
// Bucket B of voucher V lives in partition (P + B) mod partitions with key
// prefix flashsale:{pQ}:v:V:bB (bucket 0 is the voucher's own keys), each
// a voucher of its own with every key of docs/ARCHITECTURE.md's table, so
// its claims are decided by its slot's master and written to its
// partition's stream. Order ids stay unique because an id carries its
// partition.
//
//   - Limits stay exact. A user's claims are always decided in bucket
//     FNV-1a(user) mod N, so that user's count, daily count and idempotency
//     records are where the decision is made; no claim reads two slots.
//   - No stranded stock. A claim that finds its bucket dry reads every
//     bucket's stock in one pipelined round trip, takes units from the richest
//     (at least what it lacks, and half of the donor) and runs again (up to
//     16 times (admission.DryAttempts), then 503, never a false sold_out). sold_out is
//     answered only when the buckets together hold fewer units than asked.
//     The end-to-end test sells exactly the stock with no 202 to a claim sent
//     after the first sold_out (AdmittedAfterSoldOut = 0), so the remaining
//     stock was 0 when sold_out was first answered.
//   - A move is crash-safe. It is two scripts on two masters:
//     take.lua takes the units from the source and records the move in its
//     moves:out (one atomic step), give.lua adds them to the destination
//     once per move id (its moves:in set), then the record is dropped. A
//     crash between them leaves the units recorded, counted in
//     remaining_redis and reconcile, and given by the next dry claim or by
//     the reaper's mover service; a crash after giving gives nothing twice.
//     The ids given are forgotten once older than settle.ForgetAfter
//     (ForgetMoves: takes of ids that old refused first, every move owed
//     given, then the bucket's mg raised, so that a give of a forgotten
//     id is answered "given"): a sale without an end keeps no id a refill.
//     The reads of several masters are no snapshot, so a claim that sees too
//     few units looks once more before answering sold_out.
//   - What it costs. A claim in a full bucket costs what it costs in an
//     unsplit voucher. The claim that finds its bucket dry pays two to four
//     more round trips; with the stock spread evenly that happens only near
//     the end of the sale. Those round trips are made off the gateway's
//     admission pipelines (a goroutine of the claim's own), so they hold up
//     no other claim; a process refills one voucher once at a time, and the
//     claims that found its bucket dry while a refill was under way are
//     answered sold_out from that refill's read when it found the voucher
//     sold out (the voucher was sold out then, within their requests), or
//     run again at once on the units it brought to their bucket: a
//     sold-out tail with units trickling back costs a read per refill, not
//     a read and moves per claim, and a bucket found dry by many claims at
//     once (a split's new buckets, before its spread) is refilled once. The gateway learns a voucher's number of buckets
//     from the script's own answer (a claim routed by the wrong number changes
//     nothing and is told the right one), so a claim never needs a read first.
//     Operations touch every bucket: a pause or a new end is written to each,
//     a top-up goes to bucket 0 (dry buckets take from it), reconcile reads and
//     rewrites all of them. Buckets on one master buy nothing but these costs:
//     they help only on a cluster, and only when their partitions' slots are
//     on different masters (raise FLASHSALE_STREAM_PARTITIONS).
//   - How hot it is, for nothing on the claim's path. A bucket's level,
//     its stock plus the units moved out of it net of those moved in
//     (take.lua and give.lua count them in its hash's moved), falls by its
//     admissions alone; Levels reads many buckets' levels in one round
//     trip, and the reaper's detector turns the fall between two readings
//     into units admitted a second. Releases and top-ups raise it, so the
//     figure errs low; a bucket Redis does not hold is no reading. A
//     rewrite by reconcile --repair forgets moved, which can make one
//     reading high: the detector asks for every reading above its
//     threshold for a while.
//   - Split while it sells. A voucher's buckets can be raised from N to a
//     multiple M while claims run (pkg/rdb/split, whose package doc has the
//     steps; docs/ARCHITECTURE.md "A hot voucher split while it sells" the
//     invariant and why it holds): a user's bucket of M is their bucket of
//     N or one of its new children, their records are copied there while
//     their claims wait (21, splitting), and the old buckets then route
//     them on ({10, M}). The reaper's splitter runs it, for an operator's
//     PATCH or for a voucher its detector marked hot.
//   - Not for pools. Envelopes and codes keep one bucket: moving items
//     between pools, and refunding from several, is not built.
package rdb
