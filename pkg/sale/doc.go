// Package sale is the home of each kind of sale: what a voucher of that
// kind is created from, what it puts on sale, and the traits the rest of
// the pipeline reads instead of asking which kind it is.
//
// A kind is one file here. The admission script (lua/admit.lua) knows two
// shapes only, a count of identical units or a pool of distinct items;
// pkg/db persists either shape, pkg/settle gives either back, and the
// reaper and reconcile call through the traits below. Adding a kind means a
// file here, plus a script branch or a migration when it needs a new shape.
//
// # The traits, and who reads them
//
//	| trait | units | envelope | codes | who reads it |
//	| Pooled: a claim takes one distinct item | no | yes | yes | the gateway (loads the pool), reconcile (compares it) |
//	| NoPayment: an order is completed once persisted | no | yes | no | the worker's transaction (pkg/db/persist.go) |
//	| RefundsAtEnd: what nobody took goes back to the sender | no | yes | no | the reaper's refunder |
//	| Spread: the stock may be spread over buckets (stock_buckets) | yes | no | no | the gateway's creation |
//	| ToppedUp: stock may be added on sale | yes | no | no | pkg/db's change (not_toppable) |
//	| Amounts: items carry money, reported and conserved | no | yes | no | the admin API's voucher |
//
// Below the traits there are two shapes only, and every package handles
// both without naming a kind:
//
//   - A count of units. admit.lua takes quantity from stock;
//     MySQL's transaction takes it from vouchers.stock.
//   - A pool of items. Every item (an envelope with its amount, a code) is
//     a row of items from the moment the voucher is created, with no owner,
//     as in seed 002, and an entry of the voucher's Redis list …:pool.
//     admit.lua pops one item atomically with the sale window and the
//     per-user checks (and keeps stock equal to the list's length); the
//     stream entry and the order carry it. The worker's transaction takes
//     each item's row (SELECT … FOR UPDATE, then one UPDATE items SET
//     order_id = CASE item … for the batch, conditional on order_id IS
//     NULL), so MySQL never lets two orders hold one item. An item Redis
//     handed out twice (only after Redis lost its state) stays with its first
//     holder; the second order fails (item_taken) and gives nothing back to
//     the pool. A failed order's release, and a cancelled order's, push its
//     item back to the head of the pool (release.lua), and a cancellation
//     frees its row in MySQL in the same transaction.
//
// A new kind is a file in pkg/sale; it needs a script branch and a
// migration only if it needs a third shape. The envelope kind touched
// pkg/sale/envelope.go, the pool branch of admit.lua and release.lua,
// and migration 0006_kinds.sql (the items table and the refund
// columns). The pool shape and the refunder it brought are shared with
// codes.
//
// Red envelopes end with a refund. When an envelope sale's ends_at
// passes, the reaper's refunder (pkg/reaper/refunder.go):
//  1. closes the pool in Redis (rdb.ClosePool: the list goes, stock is 0
//     and the hash is marked closed), so no admission can take an envelope
//     any more whatever a gateway's clock says, and a later release gives the
//     user's count back but no envelope;
//  2. waits while any entry of the voucher is still in its partition's
//     stream (a grab admitted before the close must land, or fail, before the
//     money is counted);
//  3. in one MySQL transaction, under the voucher's row lock and only while
//     refunded_at is unset, marks every envelope without an owner
//     refunded, adds their amounts to refunded_amount, sets refunded_at
//     and takes them out of stock. Several reapers refund a voucher once.
//
// Grabbed + remaining + refunded is then the total, always: the items are
// the single record of where each cent is.
package sale
