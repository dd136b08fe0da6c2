// Package room is a voucher's waiting room: users join a queue, the room
// admits them at a fixed rate in queue order, and an admitted user holds a
// pass, for a while, without which the voucher's claims are refused.
//
// What it adds to the waiting rooms users know (Queue-it, Cloudflare's,
// AWS's) is that it knows the stock: passes outstanding (admitted, not
// lapsed, not yet used to buy) never exceed the units Redis can still sell
// times PassFactor, and when nothing is left every waiter's next answer is
// sold_out, not after their turn comes.
//
// Whoever joins in the pre-queue (from starts_at − prequeue_seconds until
// starts_at) gets a random place among the pre-queue, drawn when the sale
// starts (Shuffle: a keyed permutation, so no place is stored per waiter);
// later arrivals queue behind them in arrival order.
//
// The room's state lives in Redis beside the voucher's (room.lua, one
// slot); a gateway refreshes it a few times a second per room it serves
// (Tick) and answers waiters' polls from that state and a signed token
// the waiter carries (Tokens), without Redis.
//
// # How the room runs
//
// Where it lives. Three keys beside the voucher's hash, in its slot:
// …:v:V:room (the room's state), …:v:V:room:w (waiters: user →
// place) and …:v:V:room:told (for the report: bit 2T once ticket T was
// told sold out, 2T+1 closed; each gateway gathers the tickets it told and
// sets their bits with the room's next tick). lua/room.lua is the room: every call first runs the room's
// clock, then its operation (tick, join or get). A room is not
// driven by a timer of its own: each gateway ticks the rooms it serves
// every 100 ms (roomTick), and a tick is idempotent in time (it admits
// what the time since the last admission allows, whoever calls it), so
// three gateways tick it no faster than one. Only rooms that exist are
// ticked, each on its own with a 1 s deadline; a voucher id found without
// a room (or without a voucher) is remembered apart for 2 s, at most
// 10,000 of them, and never ticked.
//
// The clock. (1) Passes lapse: the room keeps its admissions as
// segments "upto:end:passes" (the places after the previous segment's up to
// upto hold a pass until end; admissions less than a hundredth of a
// pass apart share one, so a room holds ~100); a segment past its end is
// dropped, and gone (places up to it have lapsed) moves. (2) At the
// start the pre-queue closes. (3) Admission: floor(N × elapsed) more
// places, at most one second's worth at once (an idle room banks no
// burst), never past the last place given, and only while the passes
// outstanding stay under floor(stock × 1.5). Passes outstanding are the
// unlapsed segments' passes less those that bought: admit.lua counts a
// pass's first purchase in the voucher hash (rx:PLACE once, ru:END
// per segment), which the tick reads with one HMGET. 1.5
// (room.PassFactor) because some admitted people never buy; small, so
// nobody is admitted to a sale that cannot serve them. Units held by
// unpaid orders are not counted: they come back to the stock, and the room
// admits again, only if their orders are cancelled.
//
// The pre-queue. A join from starts_at − S until starts_at is
// recorded as pK, its arrival number among the pre-queue; a later join
// gets the next place after the pre-queue's, in arrival order. The
// pre-queue's places are a permutation of 1..pre keyed by the room's seed
// (room.Shuffle: a 12-round Feistel network over the smallest even-bit
// domain that holds pre, walking the cycle back into range), computed
// whenever a place is needed: nothing is stored per waiter for it, and the
// arrival order says nothing about the place: over many seeds, Kendall's
// tau between them has a random permutation's mean and spread at every
// size from 10 to 20,000 (TestTheShuffleIsIndistinguishableFromRandom).
// The room's seed names its shuffle's version ("2-" and 16 hex digits;
// a room seeded before has 16 digits and keeps the 4-round shuffle it was
// placed by, whose spread was 1.2 times a random permutation's just under
// powers of 4). A join before
// starts_at − S is 409 not_started.
//
// Polls without Redis. A join answers a queue_token,
// PLACE.base64url(USER).MAC (HMAC-SHA256 truncated to 16 bytes, keyed
// from FLASHSALE_POW_KEY, over the voucher, the user and the place). A
// poll GET /v1/vouchers/{id}/queue carrying it is answered from the
// gateway's last state of the room, with no Redis call; it needs no bearer
// token (the queue token names its user and is as much a capability as a
// session cookie; with a bearer token too, the two must name the same
// user). The answer: closed past ends_at; paused; waiting with
// position 0 while the pre-queue is not placed; sold_out when no unit
// is left (for everyone, whatever their place); admitted with
// pass_expires_at when the place is admitted and its segment has not
// lapsed, lapsed when it has; else waiting with position = place −
// admitted. retry_after_ms is the time until the waiter's turn, or
// until the stock could run out at the earliest (the passes outstanding
// buying the per-user limit each, then new admissions at N a second doing
// the same), whichever is sooner, between 0.7 s and 10 s: people far back
// ask rarely while the stock is plentiful, and everyone asks every 0.7 s
// once it could be gone, which with the 100 ms tick is how every waiter
// hears sold_out within a second.
//
// Claims. A claim on a voucher with a room must carry a pass: the
// gateway, if it serves that room, reads the place from
// X-Flashsale-Queue (or, without it, from Redis), checks it is admitted
// and not lapsed, and answers 403 not_admitted without the admission
// script otherwise. A gateway that does not know the room yet sends the
// claim with no pass; admit.lua reads the voucher's room field in its
// one HMGET and answers rdb.CodeNotAdmitted, and the gateway learns the room. With a
// pass, the script takes "PLACE:END" and checks now < END itself. A
// voucher without a room pays one field more in that HMGET and a map
// lookup in the gateway, and no allocation.
//
// With the other features. proof_of_work on a voucher with a room is
// asked at the room's door (the join: room.lua sets the proof's key NX,
// as admit.lua does for claims), not at its claims. A draw has no room
// (its entries are not first come), nor has a voucher with
// stock_buckets > 1 (the room meters claims, so the stock needs no
// spreading; the room's state lives with bucket 0). PATCH with
// waiting_room (or null) changes the room on a sale in progress through
// pkg/settle (voucher_changes.room; change.lua keeps the newest).
// Reconcile compares the room's settings; the room's state is not in
// MySQL: should Redis lose it, waiters lose their places and join again.
package room
