package rdb

import "strconv"

// Key layout. Partition P owns the hash tag {pP}: its stream and every key of
// every voucher V with V mod partitions == P. A script therefore touches one
// Redis Cluster slot. Changing the number of partitions moves vouchers to
// other keys: do it only between sales.
//
//	flashsale:{pP}:orders              stream of admitted orders
//	flashsale:{pP}:dead                dead-letter stream
//	flashsale:{pP}:v:V                 voucher hash: stock, limit, daily, start_ms, end_ms
//	flashsale:{pP}:v:V:users           hash user -> orders held
//	flashsale:{pP}:v:V:day:YYYYMMDD    hash user -> orders taken that day
//	flashsale:{pP}:v:V:idem:U:K        idempotency record of user U, key K
//	flashsale:{pP}:v:V:released        set of order ids whose reservation was given back
//	flashsale:{pP}:v:V:pool            list of the items left of a pooled voucher ("no|amount|code")
//	flashsale:{pP}:v:V:changes         set of the operator's changes applied (voucher_changes ids)

func partitionPrefix(p int) string { return "flashsale:{p" + strconv.Itoa(p) + "}:" }

// StreamKey is the order stream of partition p.
func StreamKey(p int) string { return partitionPrefix(p) + "orders" }

// DeadKey is the dead-letter stream of partition p.
func DeadKey(p int) string { return partitionPrefix(p) + "dead" }

func voucherKey(p int, v int64) string {
	return partitionPrefix(p) + "v:" + strconv.FormatInt(v, 10)
}
func usersKey(p int, v int64) string           { return voucherKey(p, v) + ":users" }
func dayKey(p int, v int64, day string) string { return voucherKey(p, v) + ":day:" + day }
func releasedKey(p int, v int64) string        { return voucherKey(p, v) + ":released" }
func poolKey(p int, v int64) string            { return voucherKey(p, v) + ":pool" }
func changesKey(p int, v int64) string         { return voucherKey(p, v) + ":changes" }
func idemKey(p int, v int64, user, key string) string {
	return voucherKey(p, v) + ":idem:" + user + ":" + key
}
