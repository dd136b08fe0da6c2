package rdb

// The refusals of flashsale's scripts that decide for a buyer (admit.lua,
// room.lua, and any added that refuses a claim or a join): one table, one
// meaning per code in every such script. Each caller maps the codes it can
// get to its errors through these constants; TestEveryScriptsCodesAreTheTables
// holds the scripts' bodies to the table, and TestTheScriptsHeadersName
// TheirCodesByTheTable their headers. The other scripts answer counts, or
// 1/0/-1 of their own (change.lua: applied now, before, not in Redis), not
// refusals.
const (
	CodeVoucherNotFound = 1  // no such voucher
	CodeNotStarted      = 2  // too early: the sale (a room: its queue) has not opened
	CodeEnded           = 3  // the sale has ended
	CodeSoldOut         = 4  // fewer units left than asked
	CodeUserLimit       = 5  // the user's limit reached
	CodeDailyLimit      = 6  // the user's limit of the day reached
	CodeOverloaded      = 7  // the stream entry could not be numbered: nothing changed, retry
	CodeQuantityAbove   = 8  // more units asked than the per-user limit: never admitted
	CodePaused          = 9  // an operator paused the sale
	CodeRouteAgain      = 10 // the voucher has another number of buckets ({10, n})
	CodeAlreadyEntered  = 11 // the user entered this draw already
	CodeProofRequired   = 12 // a proof of work is wanted and there is none
	CodeProofInvalid    = 13 // the proof is too easy, or used before
	CodeNotAdmitted     = 14 // the voucher has a waiting room and no pass holds
	CodeNotLoaded       = 15 // the voucher is missing from a partition not marked loaded: an outage
	CodeAccessRequired  = 16 // the voucher needs an access code now and there is none
	CodeAccessInvalid   = 17 // it needs one now and the one given is not the user's
	CodeNoRoom          = 18 // the voucher has no waiting room
	CodeNotInQueue      = 19 // the user never joined the room
	CodeRoomFull        = 20 // the room has given all the places it may
	CodeSplitting       = 21 // the voucher is splitting and the user's records are moving: retry shortly
	CodePastHorizon     = 22 // the claim reached Redis after its horizon: nothing taken
)

// Codes names each code, for the tests that hold the scripts to the table
// (scriptCodes, in its tests).
var Codes = map[int64]string{
	CodeVoucherNotFound: "voucher not found", CodeNotStarted: "not started", CodeEnded: "ended", CodeSoldOut: "sold out",
	CodeUserLimit: "user limit", CodeDailyLimit: "daily limit", CodeOverloaded: "overloaded", CodeQuantityAbove: "quantity above the limit",
	CodePaused: "paused", CodeRouteAgain: "route again", CodeAlreadyEntered: "already entered", CodeProofRequired: "proof required",
	CodeProofInvalid: "proof invalid", CodeNotAdmitted: "not admitted", CodeNotLoaded: "not loaded", CodeAccessRequired: "access required",
	CodeAccessInvalid: "access invalid", CodeNoRoom: "no room", CodeNotInQueue: "not in queue", CodeRoomFull: "room full",
	CodeSplitting: "splitting", CodePastHorizon: "past horizon",
}
