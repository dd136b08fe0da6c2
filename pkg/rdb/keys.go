package rdb

import (
	"time"

	"github.com/flashsale/flashsale/pkg/rdb/internal/keyspace"
)

// Key layout. Partition P owns the hash tag {pP}: its stream and every key of
// every voucher V with V mod partitions == P. A script therefore touches one
// Redis Cluster slot. Changing the number of partitions moves vouchers to
// other keys: do it only between sales.
//
//	flashsale:{pP}:orders              stream of admitted orders, one entry per 32 orders of an admission call
//	flashsale:{pP}:backlog             orders in stream entries not yet acknowledged
//	flashsale:{pP}:dead                dead-letter stream, one entry per order
//	flashsale:{pP}:wait                a write the durability check waits on (FLASHSALE_REDIS_DURABILITY), for an hour
//	flashsale:{pP}:loaded              set by the reaper once the partition holds every voucher MySQL has on sale in it
//	flashsale:{pP}:rooms               hash voucher id -> 1 it has a waiting room, 0 it has none, of the partition's vouchers;
//	                                   field * once it names every one Redis holds (RoomsKey)
//	flashsale:{pP}:alive:C             set by consumer C while it reads the partition, for ConsumerAliveTTL
//	flashsale:{pP}:v:V                 voucher hash: stock, limit, daily, start_ms, end_ms, buckets, ..., name (bucket 0)
//	                                   and u:USER -> units user USER holds (read with the voucher, one HMGET)
//	                                   and o:USER -> positions of USER's admissions not yet seen persisted
//	                                   and moved: units moved out to other buckets net of those moved in (Levels)
//	                                   and ti = end_ms once the users' indexes were trimmed after that end (upkeep.Indexes.Trim)
//	                                   and rf: releases known owed before this unix ms are refused (ForgetReleases)
//	flashsale:{pP}:v:V:day:YYYYMMDD    hash user -> units taken that day
//	flashsale:{pP}:v:V:idem:U:K        idempotency record of user U, key K
//	flashsale:{pP}:v:V:released        set of order ids whose reservation was given back, until forgotten (ForgetReleases)
//	flashsale:{pP}:v:V:pool            list of the items left of a pooled voucher ("no|amount|code")
//	flashsale:{pP}:v:V:changes         set of the operator's changes applied (voucher_changes ids)
//	flashsale:{pP}:v:V:dirty           list, while V splits: the records admit.lua wrote of moving users (pkg/rdb/split)
//	flashsale:{pP}:v:V:moves:out       hash move id -> "to units": units taken from here, not yet given
//	flashsale:{pP}:v:V:moves:in        set of move ids whose units were given here ("MS.RANDOM"; made in
//	                                   the last settle.ForgetAfter: ForgetMoves forgets the older)
//	flashsale:{pP}:v:V:room            a waiting room's state (pkg/room, room.lua)
//	flashsale:{pP}:v:V:room:w          a waiting room's waiters: user -> place
//	flashsale:{pP}:v:V:room:told       bitmap of the places told how the sale ended: bit 2T ticket T heard sold_out, 2T+1 closed
//	flashsale:{pP}:v:V:proof:S         a proof of work spent on V (S its challenge's signature), for its TTL
//
// and, in no partition:
//
//	flashsale:gauges-exporter          which reaper exports the stream gauges now (a lease)
//
// A voucher with stock_buckets N > 1 (a hot item) has N buckets, each a
// voucher of its own with every key above: bucket 0 is the voucher's own
// keys, bucket B > 0 lives in partition (P+B) mod partitions, prefix
// flashsale:{pQ}:v:V:bB, so on a cluster the buckets' slots spread over the
// masters. A user's claims are always decided in the same bucket
// (UserBucket), so that user's counts live where they are checked. Units
// move between buckets (take.lua, then give.lua) when one runs dry. The bucket keys are named by pkg/rdb/internal/keyspace,
// which the parts of pkg/rdb share.

// StreamKey is the order stream of partition p.
func StreamKey(p int) string { return keyspace.StreamKey(p) }

// BacklogKey counts partition p's orders whose stream entries are not yet
// acknowledged: admit.lua adds an entry's orders, ack.lua takes them off.
// One stream entry carries up to order.MaxPerEntry orders, so the stream's
// length counts admission calls, and this counts orders.
func BacklogKey(p int) string { return keyspace.Prefix(p) + "backlog" }

// DeadKey is the dead-letter stream of partition p.
func DeadKey(p int) string { return keyspace.Prefix(p) + "dead" }

// LoadedKey marks partition p as loaded: the reaper set it after checking
// that Redis holds every voucher MySQL has on sale in p. A Redis that lost
// its data lost it too, so a voucher missing there is an outage, not an
// unknown voucher (admit.lua).
func LoadedKey(p int) string { return keyspace.Prefix(p) + "loaded" }

// RoomsKey is partition p's index of its vouchers' waiting rooms: field
// V is 1 when voucher V has a room, 0 when it has none, written with the
// voucher's hash (a voucher put in Redis, change.lua); field * says the
// index names every voucher Redis holds in p (the reaper's restorer sets
// it once it has indexed the vouchers written before the index existed,
// to a value of its own each time: a partition lost and indexed again is
// never mistaken for the one a gateway read); field ~v is its version,
// raised by every write that changes a voucher's field. A gateway reads
// the versions once a second and the fields of the partitions whose
// version changed (RoomIndex), so that a poll of an id it names without
// a room, or of an id it does not name at all, costs Redis nothing. The
// reaper's trimmer drops the fields of vouchers Redis no longer holds
// (PruneRoomIndex): the index holds what the live vouchers hold.
func RoomsKey(p int) string { return keyspace.Prefix(p) + "rooms" }

// RoomsKey's fields: the mark that the index is complete, and its
// version.
const (
	roomsComplete = "*"
	RoomsVersion  = "~v"
)

// AliveKey says consumer c reads partition p: each worker renews it
// while it runs (Alive), and the reaper never removes a consumer whose
// key is there (delconsumer.lua). Redis 7.0 does not reset a consumer's
// idle time on a read that returns nothing, so idle alone cannot tell a
// live worker on a quiet partition from a gone one.
func AliveKey(p int, c string) string { return keyspace.Prefix(p) + "alive:" + c }

// waitKey is the key a durability check of partition p writes and waits on.
func waitKey(p int) string { return keyspace.Prefix(p) + "wait" }

// gaugesKey is the lease of the reaper exporting the stream gauges.
func gaugesKey() string { return "flashsale:gauges-exporter" }

// bucket is where one bucket of a voucher lives, and names its keys.
type bucket = keyspace.Bucket

// bucketOf is bucket n of voucher v.
func (s *Store) bucketOf(v int64, n int) bucket { return keyspace.BucketOf(s.partitions, v, n) }

// userBucketOf is the bucket of voucher v (of n buckets) that decides
// user's claims: where that user's counts and pending-order index live,
// and whose stream (b.Stream(), partition b.P) carries their orders. It
// is the one answer to "the stream of (voucher, user)"; VoucherPartitions
// is the one answer to "every stream of a voucher".
func (s *Store) userBucketOf(v int64, user string, n int) bucket {
	return s.bucketOf(v, UserBucket(user, n))
}

// AccessCode is what a claim (or a room join) carries of an access code,
// as the gateway verified it: a code is looked at only where the voucher
// needs one now (the sale's access codes, before their until), so one
// sent to an open sale is no reason to refuse.
type AccessCode int64

const (
	NoAccessCode      AccessCode = iota // none sent
	AccessCodeValid                     // the user's code for the voucher
	AccessCodeInvalid                   // a code, not the user's for the voucher
)

// Proof is a verified proof of work as the admission script takes it: a
// voucher with a gate admits a claim with a proof of at least its
// difficulty, once per challenge.
type Proof struct {
	ID  string        // the challenge's signature: its single use is keyed by it
	Max int64         // the challenge's difficulty
	TTL time.Duration // how long the challenge has left
}

// ProofKey is the used-key of the proof of work whose challenge's
// signature is id, spent on the voucher (bucket) whose hash is key; id ""
// is the key a claim without a proof names (the scripts ignore it).
func ProofKey(key, id string) string { return keyspace.ProofKey(key, id) }

// Args returns a proof's key and the two arguments the scripts take for
// it: its difficulty and its used-key's TTL in seconds (0, 0: none).
func (p Proof) Args(key string) (string, int64, int64) {
	if p.ID == "" {
		return ProofKey(key, ""), 0, 0
	}
	return ProofKey(key, p.ID), p.Max, max(int64((p.TTL+time.Second-1)/time.Second), 1)
}

// RoomKey is the waiting room's state hash of the voucher whose hash is
// key.
func RoomKey(key string) string { return key + ":room" }

// RoomWaitersKey is the waiters' hash of the room whose state is state.
func RoomWaitersKey(state string) string { return state + ":w" }

// RoomToldKey is the bitmap of the places told how the sale ended, of the
// room whose state is state.
func RoomToldKey(state string) string { return state + ":told" }

// VoucherKey is voucher v's hash (its bucket 0): where a waiting room
// lives, since a voucher with a room has one bucket.
func (s *Store) VoucherKey(v int64) string { return s.bucketOf(v, 0).Key() }

func userField(user string) string { return keyspace.UserPrefix + user }

// MaxBuckets bounds a voucher's stock_buckets.
const MaxBuckets = keyspace.MaxBuckets

// UserBucket is the bucket, of n, in which user's claims are decided.
func UserBucket(user string, n int) int { return keyspace.UserBucket(user, n) }
