// Package proof is the proof-of-work gate's cryptography: ALTCHA challenges
// (github.com/altcha-org/altcha-lib-go) bound to a user, a difficulty and
// an expiry, and the verification of their solutions. It does no I/O: a
// solution's single use is the admission script's to enforce (the proof's
// ID is the key it sets).
//
// A challenge's salt carries its parameters (ALTCHA's "salt?params&"
// form): the user it was issued to, the voucher it may be spent on, its
// difficulty max (the largest number the secret may be) and when it
// expires. A proof is spent once on its voucher: a challenge that named
// no voucher could be solved ahead of time and spent on every gated one. The salt is inside the
// hashed challenge and the challenge inside the HMAC signature, so none
// of them can be changed without the key.
//
// # The gate on a voucher
//
// A voucher created with proof_of_work: {"max_number": M} admits a claim
// only with a solved ALTCHA (https://altcha.org) challenge (pkg/proof,
// over github.com/altcha-org/altcha-lib-go). GET /v1/challenge issues one
// for the caller whose salt carries user, max (the difficulty: the
// secret number is at most max) and expires; the salt is inside the
// hashed challenge and the challenge inside the HMAC signature
// (FLASHSALE_POW_KEY), so none can be changed. A claim's
// X-Flashsale-Proof is verified in the gateway (signature, user, expiry,
// by the gateway's clock) before Redis: a bad one is 403 proof_invalid
// without a script call. The admission script then holds the rest
// atomically with the claim: the voucher hash's pow field is the gate's
// difficulty; a claim with no proof is proof_required, one whose max
// is lower than pow or whose key (…:v:V:proof:<signature>, in the
// voucher's slot, set NX for the challenge's remaining life) exists is
// proof_invalid. An idempotent replay is answered before the gate, so a
// client retrying a lost 202 needs no new proof. A claim with no proof
// sends nothing of one (its line in the call ends before the proof's
// fields): a voucher without a gate costs a claim the one pow field read
// in the script's HMGET.
// PATCH with proof_of_work (or null) changes the gate on a sale in
// progress through the one protocol of pkg/settle (a voucher_changes
// row with pow; change.lua keeps the newest by change id, as for a
// pause).
package proof
