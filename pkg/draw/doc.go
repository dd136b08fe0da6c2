// Package draw is the procedure of a draw sale, with no I/O: the seed and
// its commitment, the key that orders the entries, and the selection of
// the first entries in that order without holding them all.
//
// The procedure, precisely enough to check it in another language:
//
//  1. At creation flashsale draws a secret seed of 32 random bytes and
//     publishes its commitment, the lowercase hex of SHA-256(seed).
//  2. Every entry has an id, a positive 64-bit integer (the entry_id of
//     its 202). Its key is SHA-256(seed ‖ id), where ‖ is concatenation
//     and id is written in decimal ASCII without sign or leading zeros.
//  3. The draw order sorts the entries by key, as unsigned big-endian
//     256-bit numbers (bytewise), ascending; two equal keys (never seen:
//     it would be a SHA-256 collision) are ordered by id.
//  4. With S units on sale when the draw runs and E entries, the first
//     W = min(S, E) entries win. The rest is the waitlist, in the same
//     order: a winner who does not pay in time (or cancels) passes the
//     unit to the first entry of the waitlist that has not had one.
//  5. After the draw the seed is published (hex); anyone checks that its
//     SHA-256 is the commitment and recomputes 2 to 4 over the entry ids.
//
// # Draw sales
//
// A voucher's allocation is first_come (every other sale) or draw
// (units or codes; ends_at required; one entry per user). For the
// hottest drops speed stops mattering: users enter during the window,
// and when it is over the reaper draws the winners from a seed committed
// to at creation. The load is the same shape as claims, spread over a
// window instead of a second.
//
// Entering. A claim on a draw voucher runs the same admission script
// (admit.lua, its draw branch): the window, a pause and one entry per
// user (u:USER counts entries; a second answers 409 already_entered),
// then an XADD with entry 1. It takes no stock and no item. The answer
// is 202 {"entry_id","status":"entered"}. A worker persists the entry as
// a row of orders with status entered in the same batched transaction
// as orders (pkg/db/draw.go allotEntries: under the voucher's row
// lock, an entry fails draw_closed once the draw has begun, and a second
// entry of a user fails user_limit, with the release of its entry only,
// never of stock: release.lua gives a draw no stock or item back).
//
// The seed. The gateway draws 32 random bytes (crypto/rand) when it
// creates the voucher; MySQL keeps them (vouchers.draw_seed, hex) and
// every read of the voucher shows seed_commitment, the hex SHA-256 of the
// seed. The seed itself is shown only once the draw is done. (An operator
// with read access to MySQL can see the seed before the draw: the
// commitment proves the seed was not changed, not that nobody looked.)
//
// The entries are the voucher's rows of orders that did not fail
// (reaper draw verify --entries prints their ids). In shell, one entry's
// key:
//
//	printf '%s' "$SEED" | xxd -r -p | cat - <(printf '%s' "$ID") | sha256sum
//
// Test vector (TestKeyIsTheDocumentedHash holds it): seed
// 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f, id
// 12345 → key 6ba012c11e8f2d91071a509ff776bdf5fa3f79f77fe1b18d71e0ec6f28927aee.
//
// The draw (pkg/reaper/drawer.go), once ends_at + 2 s
// (reaper.DrawGrace, for gateways whose clocks run behind) has passed:
//
//  1. the voucher waits while any entry of it is still in a stream (every
//     entry admitted before the end must be persisted, or failed, first);
//  2. MySQL closes it to entries under its row lock (open → drawing);
//  3. the reaper streams the entry ids once and keeps, in a bounded heap
//     (draw.First), the first W + B in draw order, where W =
//     min(stock, entries) and B = max(W, 1000) (db.WaitlistBlock): the
//     winners and the head of the waitlist. No key is written to MySQL; the
//     keys are computed in Go, by pkg/draw, and nowhere else;
//  4. one transaction, under the row lock and only while the state is
//     drawing, writes those entries' places (orders.draw_rank, 1 to
//     W + B), makes the first W orders created (drawn = 1) with a
//     payment window from the draw, gives a codes sale's winners its free
//     codes in item order (the k-th winner the k-th code), takes W from
//     vouchers.stock, and sets drawn, drawn_at and draw_winners;
//  5. the other entries become lost, 20,000 a statement.
//
// Several reapers may run it at once: each computes the same ranks, and
// step 4 commits once (the state is checked under the lock). A reaper
// killed anywhere leaves a state the next round finishes with the same
// winners, because they depend on the seed and the entries only. The draw
// writes a few rows per unit, not one per entry: ranking a million entries
// costs one streamed read and SHA-256 a million times in the reaper.
//
// The waitlist. A winner who does not pay in time (the expirer) or
// cancels does not give the unit back to a sale that is over: in the same
// transaction that cancels the order, under the voucher's row lock, the
// unit (and a code's item) passes to the first entry of the waitlist in
// draw order that has had none (lost, or entered while step 5 is still
// running; by draw_rank, through the index orders_draw_rank), which
// becomes created (drawn = 2) with a fresh payment window. A waitlist
// that reaches the end of the ranked entries ranks the next B of those
// not ranked yet (one streamed read, in the same transaction); the ranked
// entries are always a prefix of the draw order. When the list is exhausted the unit goes back to
// vouchers.stock, unsold, and stays there. Nothing is owed to Redis:
// Redis admits nothing more for the voucher.
//
// Checking it. reaper draw verify VOUCHER_ID [--json] [--entries]
// reads the revealed seed, checks it against the commitment, streams the
// entry ids from MySQL through a selection that keeps only the first
// W + P in draw order (memory bounded by the winners, not the entries),
// and exits 0 only if the entries recorded as won (drawn = 1) are exactly
// the first W, those the waitlist served (drawn = 2) exactly the next
// P, and the ranks MySQL holds exactly the first places of the order. GET /v1/vouchers/{id}/draw shows the state, the entries,
// winners, units passed down the waitlist, paid orders, the commitment and,
// once drawn, the seed.
package draw
