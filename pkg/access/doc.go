// Package access makes and checks access codes: what lets a user claim a
// voucher that only invited users may claim (a presale, an invite-only
// drop) while its codes hold.
//
// A code names one voucher and one user: it is an HMAC of the two under
// the gateway's access key, so the gateway checks it with no call to any
// store and no list of codes kept anywhere, and a code given to one user
// is worth nothing to another. Whoever holds the key can make every code:
// it is FLASHSALE_ACCESS_KEY, or derived one-way from the admin token.
//
// # The codes on a voucher
//
// A voucher with access (API.md, "Access codes") admits a claim, and its
// room a join, only with the caller's code while the codes hold. A code is
// the first 120 bits of an HMAC-SHA256 of the voucher id and the user id
// under FLASHSALE_ACCESS_KEY (pkg/access), base64url: the gateway
// checks X-Flashsale-Access against the claim's voucher and its token's
// user before Redis (a wrong one is 403 access_invalid, no script call),
// and tells the script only that a code was verified (a claim's ACCESS
// field; room.lua's ARGV[10]). The script holds the rest with the
// claim, atomically: the voucher hash's access field is -1 (the whole
// sale) or the unix millisecond until which codes are needed, and a claim
// without a verified code before it is access_required (rdb.CodeAccessRequired,
// in both scripts). No list of codes is kept anywhere; MySQL's access
// column is the same value, changed by PATCH through voucher_changes
// like every change, and reconcile compares the two.
package access
