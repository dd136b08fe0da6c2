// Package lua holds flashsale's Redis scripts. Each .lua file starts with its
// contract (KEYS, ARGV, return values); pkg/rdb calls them, and pkg/room
// the waiting room's.
package lua

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed admit.lua
	admitSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed ack.lua
	ackSrc string
	//go:embed delconsumer.lua
	delConsumerSrc string
	//go:embed lease.lua
	leaseSrc string
	//go:embed change.lua
	changeSrc string
	//go:embed take.lua
	takeSrc string
	//go:embed give.lua
	giveSrc string
	//go:embed pending.lua
	pendingSrc string
	//go:embed room.lua
	roomSrc string
	//go:embed forget.lua
	forgetSrc string
	//go:embed split.lua
	splitSrc string
	//go:embed prunerooms.lua
	pruneRoomsSrc string
	//go:embed forgetmoves.lua
	forgetMovesSrc string
	//go:embed outcome.lua
	outcomeSrc string
)

// Admit decides a batch of claims of one voucher bucket, in order: each
// one's sale window, stock, per-user and per-day limits, idempotency
// replay, proof of work, room pass, deduction and the XADD of its order
// (admit.lua).
var Admit = redis.NewScript(admitSrc)

// Release gives back one order's reservation exactly once (release.lua).
var Release = redis.NewScript(releaseSrc)

// Forget drops released orders' ids MySQL recorded done, raising the
// bucket's cutoff first (forget.lua).
var Forget = redis.NewScript(forgetSrc)

// PruneRooms drops from a partition's rooms' index the vouchers Redis no
// longer holds (prunerooms.lua).
var PruneRooms = redis.NewScript(pruneRoomsSrc)

// Split runs one step of splitting a voucher's buckets on one bucket
// (split.lua).
var Split = redis.NewScript(splitSrc)

// Ack acknowledges and deletes persisted entries (ack.lua).
var Ack = redis.NewScript(ackSrc)

// DelConsumer removes a consumer that has nothing pending (delconsumer.lua).
var DelConsumer = redis.NewScript(delConsumerSrc)

// Lease renews a consumer's hold on entries it still owns (lease.lua).
var Lease = redis.NewScript(leaseSrc)

// Change applies an operator's change of a voucher exactly once (change.lua).
var Change = redis.NewScript(changeSrc)

// Take and Give move units between two buckets of a hot voucher: Take
// on the source (recording the move), Give on the destination, once per
// move (take.lua, give.lua).
var (
	Take = redis.NewScript(takeSrc)
	Give = redis.NewScript(giveSrc)
)

// ForgetMoves forgets the ids of the moves given to a bucket up to a time,
// refusing takes of ids made by then first (forgetmoves.lua).
var ForgetMoves = redis.NewScript(forgetMovesSrc)

// Pending lists one user's pending orders of one bucket by the user's
// index, pruning what was persisted (pending.lua).
var Pending = redis.NewScript(pendingSrc)

// Room runs a voucher's waiting room: its clock, then a join or a
// lookup (room.lua; pkg/room is its caller).
var Room = redis.NewScript(roomSrc)

// Outcome reads a claim's outcome record and Redis's clock together
// (outcome.lua).
var Outcome = redis.NewScript(outcomeSrc)

// All lists every script, for loading at start-up.
var All = []*redis.Script{Admit, Release, Forget, Ack, DelConsumer, Lease, Change, Take, Give, Pending, Room, Outcome}
