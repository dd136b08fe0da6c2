// Package order holds the domain of an admitted order: its identity, the
// statuses it moves through and the id scheme shared by gateway and workers.
// It does no I/O.
//
// # Order ids
//
// An order id is derived from the stream entry ms-seq that carries the
// order and the order's index k in it (its field ok):
//
//	63 bits = (ms − 2024-01-01) 41 bits | seq 7 bits | k 5 bits | partition 10 bits
//
// The middle 12 bits, seq × 32 + k, are the order's position within its
// millisecond: admit.lua answers an admission as ms-position, and the
// idempotency records and the users' indexes (o:USER) hold positions.
//
//   - Unique across gateway replicas and partitions. Redis assigns entry
//     ids within a partition, an entry numbers its orders, and the partition
//     is part of the id.
//   - Costs no extra Redis write.
//   - Does not restart from 1 if Redis loses its data. New entry ids start
//     from the clock.
//   - Leads back to the entry. GET /v1/orders/{id} answers pending with
//     one XRANGE while the order is still in the stream.
//
// More than 128 entries in one millisecond in one partition cannot be
// numbered. The script then removes the entry, undoes the admissions it
// carried (units, counts and items back), answers those claims and the
// rest of the call "overloaded", which the gateway returns as 503. A
// partition's Redis runs one script at a time, and an admission call costs
// well over 8 µs of it, so 128 calls do not fit in one millisecond.
package order
