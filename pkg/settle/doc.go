// Package settle is the one place between MySQL and Redis: pkg/db and
// pkg/rdb do not know each other, and every write that must reach both
// goes through here, by one protocol:
//
//  1. record it in MySQL, in the transaction that makes it true there: a
//     row of releases (a unit given back) or of voucher_changes (a
//     voucher's creation, a pause or resume, a top-up, a new end);
//  2. apply it to Redis once: release.lua ignores an order released
//     before, change.lua a change applied before (and keeps the latest
//     end and pause whatever the order), a creation writes each bucket
//     only if it is not there;
//  3. mark the row applied in MySQL.
//
// A crash (or Redis down) between 1 and 3 leaves the row owed, and the
// reaper applies what is owed (Owed); nothing is applied twice and
// nothing reaches Redis that MySQL did not record. The gateway, the
// workers, the reaper and reconcile all call here.
//
// A unit is given back only for an order MySQL has recorded as failed or
// cancelled: only pkg/db hands out a db.Release, built from such a row.
//
// # When Redis misses a write
//
// The caller (the gateway for an operator's write or a buyer's
// cancellation, a worker for a failed order) applies at once; if Redis
// cannot take it, or the process dies between 1 and 3, the row stays owed
// and the reaper's next round applies what is owed, oldest first
// (settle.Owed). Nothing is applied twice, and nothing reaches Redis that
// MySQL did not record. A change of a voucher whose creation is still owed
// waits for it (the creation, read from MySQL then, includes it); one of a
// voucher Redis lost after its creation is marked, and reaper reconcile
// --repair rebuilds the voucher whole (settle.Rebuild). What the API
// answers when Redis misses a write: a creation 201 (it exists, and goes
// on sale when the reaper applies it: a 503 would invite a second
// voucher), a pause or resume 503 (it stands in MySQL; a retry is
// harmless), a top-up or new end 200.
//
// The conversion of a MySQL voucher to its Redis state (settle.RedisVoucher)
// and the keys' expiry policy are settle's. Persisting stream entries is
// pkg/persist's (persist.Orders: the batch transaction, the releases of
// what MySQL failed, through settle.Releases, the acknowledgement, and the
// failure policy): the worker's reader (Process) and the reaper (Handle,
// for the entries it takes over and the dead letters it requeues) both call
// it.
//
// # Release exactly once
//
// release.lua adds the order id to the voucher's released set and gives
// back the unit and the user's counts only if the id was new. A worker that
// crashes after the MySQL commit but before the release gets the entry
// again. It finds the order already failed in MySQL, calls release again,
// and the set turns the second call into a no-op.
//
// The set holds the last minutes' releases, not a sale's every one. Once
// MySQL has recorded a release done (releases.redis_released_at) only a
// caller that read it owed before can ask for it again; ForgetAfter later
// the reaper's trimmer drops its id (forget.lua), having first raised the
// bucket's cutoff rf to that time. Every caller tells release.lua when it
// knew the release owed (a time read before it read MySQL's row, or made
// it): one that knew before rf may hold a release done and forgotten since,
// and is refused (rdb.ErrStaleRelease), leaving MySQL's row as it is; if it
// is still owed, the releaser reads it again with a fresh time. A release
// is given once either way: while its id is in the set, by the set; after,
// by the cutoff, since it was recorded done before the cutoff and a caller
// that knew it owed knew before that.
package settle
