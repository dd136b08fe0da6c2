package rdb

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/lua"
	"github.com/flashsale/flashsale/pkg/order"
)

// Admission rejections, one per code of admit.lua.
var (
	ErrVoucherNotFound = errors.New("voucher not found")
	ErrNotStarted      = errors.New("sale not started")
	ErrEnded           = errors.New("sale ended")
	ErrSoldOut         = errors.New("sold out")
	ErrUserLimit       = errors.New("user limit reached")
	ErrDailyLimit      = errors.New("daily limit reached")
	// ErrOverloaded means the partition took more than order.MaxEntrySeq stream entries in one
	// millisecond; nothing was changed and the claim may be retried.
	ErrOverloaded = errors.New("partition overloaded")
	// ErrQuantityAboveLimit means the claim asks for more units than the
	// voucher's per-user limit; it can never be admitted.
	ErrQuantityAboveLimit = errors.New("quantity above the per-user limit")
	// ErrPaused means an operator paused the sale.
	ErrPaused = errors.New("sale paused")
	// ErrAlreadyEntered means the user entered this draw already (one entry per
	// user).
	ErrAlreadyEntered = errors.New("already entered")
	// ErrProofRequired means the voucher has a proof-of-work gate and the claim
	// carried no proof, and ErrProofInvalid that its proof was too easy
	// for the gate, or used before.
	ErrProofRequired = errors.New("proof of work required")
	ErrProofInvalid  = errors.New("proof of work too easy or used before")
	// ErrNotAdmitted means the voucher has a waiting room (pkg/room) and the
	// claim no pass that holds.
	ErrNotAdmitted = errors.New("not admitted by the waiting room")
	// ErrNotLoaded means the voucher is missing from a partition the reaper has
	// not marked loaded (LoadedKey): Redis lost its data, or was never
	// loaded. An outage of the voucher until the reaper rebuilds it from
	// MySQL, not an unknown voucher.
	ErrNotLoaded = errors.New("redis does not hold the voucher's partition (restarted empty?)")
	// ErrAccessRequired means the voucher needs an access code (pkg/access)
	// now, and the claim or join carried none.
	ErrAccessRequired = errors.New("access code required")
	// ErrAccessInvalid means the voucher needs an access code now, and the
	// claim's or join's is not the user's for it.
	ErrAccessInvalid = errors.New("access code not the user's for the voucher")
	// ErrSplitting means the voucher is splitting into more buckets (pkg/rdb/split)
	// and the user's records are moving to their new bucket: nothing was
	// changed; try again shortly (a claim is, within its deadline).
	ErrSplitting = errors.New("voucher splitting into more buckets: try again shortly")
	// ErrPastHorizon means the claim's call reached Redis after the claim's
	// horizon (Claim.Horizon), when its gateway had stopped listening
	// for the reply: nothing was taken. For its buyer it is as a claim
	// never sent.
	ErrPastHorizon = errors.New("claim reached redis after its horizon: nothing taken")
)

// admitErrors are admit.lua's refusals (codes.go), as errors.
var admitErrors = map[int64]error{
	CodeVoucherNotFound: ErrVoucherNotFound, CodeNotStarted: ErrNotStarted, CodeEnded: ErrEnded, CodeSoldOut: ErrSoldOut,
	CodeUserLimit: ErrUserLimit, CodeDailyLimit: ErrDailyLimit, CodeOverloaded: ErrOverloaded, CodeQuantityAbove: ErrQuantityAboveLimit,
	CodePaused: ErrPaused, CodeAlreadyEntered: ErrAlreadyEntered, CodeProofRequired: ErrProofRequired, CodeProofInvalid: ErrProofInvalid,
	CodeNotAdmitted: ErrNotAdmitted, CodeNotLoaded: ErrNotLoaded, CodeAccessRequired: ErrAccessRequired, CodeAccessInvalid: ErrAccessInvalid,
	CodeSplitting: ErrSplitting, CodePastHorizon: ErrPastHorizon,
}

// DayKeyTTL is how long a per-day counter outlives its day.
const DayKeyTTL = 48 * time.Hour

// DefaultGroup is the consumer group the workers form.
const DefaultGroup = "flashsale-workers"

// Store is flashsale's Redis state.
type Store struct {
	c          redis.UniversalClient
	partitions int
	group      string
	buckets    sync.Map // voucher id -> its number of buckets, once seen
	dry        sync.Map // voucher id -> *dryVoucher: its refills (detour.go)
	signals    testSignals
	durability Durability
	// ac, when set, is the client admissions are sent on (SetAdmitClient).
	ac redis.UniversalClient
	// loaded is each partition's LoadedKey, built once; admitKeys each
	// partition's StreamKey, LoadedKey and BacklogKey, boxed once as
	// every admission call sends them.
	loaded    []string
	admitKeys [][3]any
	// horizon is the last call's horizon, boxed (horizonArg).
	horizon atomic.Pointer[boxedHorizon]
	// callKeys are the admission calls' keys by bucket (callKeysOf): a
	// map under a lock, as a sync.Map would box the bucket of each
	// lookup, an allocation a call.
	callKeysMu sync.RWMutex
	callKeys   map[bucket]*callKeys
}

// testSignals are the points of a Store where its tests act
// (export_test.go sets them; nil in production, each is skipped). The
// Store waits while the test acts.
type testSignals struct {
	// refill: a refill of a dry bucket starts, before its read of the
	// buckets' stocks.
	refill func()
}

// New returns a Store over client with the given number of stream partitions
// (1..order.MaxPartitions) and consumer group ("" = DefaultGroup).
func New(client redis.UniversalClient, partitions int, group string) (*Store, error) {
	if partitions < 1 || partitions > order.MaxPartitions {
		return nil, fmt.Errorf("stream partitions must be 1..%d, got %d", order.MaxPartitions, partitions)
	}
	if group == "" {
		group = DefaultGroup
	}
	s := &Store{c: client, partitions: partitions, group: group, loaded: make([]string, partitions), admitKeys: make([][3]any, partitions),
		callKeys: map[bucket]*callKeys{}}
	for p := range partitions {
		s.loaded[p] = LoadedKey(p)
		s.admitKeys[p] = [3]any{StreamKey(p), s.loaded[p], BacklogKey(p)}
	}
	return s, nil
}

// SetAdmitClient makes admissions go on c, a client of the same Redis
// whose read timeout is as long as a claim's outcome is listened for
// (the gateway's FLASHSALE_CLAIM_OUTCOME_TIMEOUT; a batcher's round trip
// has no deadline of its own): the Store's own client gives up on a
// reply after its read timeout, and closes the connection, losing the
// reply of a script that may have run. Set it before any admission.
func (s *Store) SetAdmitClient(c redis.UniversalClient) { s.ac = c }

// cutAdmissions closes the admission client, if the store has one: its
// round trips in flight end at once (Batcher.CloseBy).
func (s *Store) cutAdmissions() {
	if s.ac != nil {
		_ = s.ac.Close()
	}
}

func (s *Store) admitClient() redis.UniversalClient {
	if s.ac != nil {
		return s.ac
	}
	return s.c
}

// Partitions is the number of stream partitions.
func (s *Store) Partitions() int { return s.partitions }

// Group is the consumer group name.
func (s *Store) Group() string { return s.group }

// Client is the underlying client, for tests and readiness checks.
func (s *Store) Client() redis.UniversalClient { return s.c }

// PartitionOf is the partition holding voucher v.
func (s *Store) PartitionOf(v int64) int { return int(uint64(v) % uint64(s.partitions)) }

// Load loads every script, so a broken script fails at start-up and
// pipelined EVALSHA calls find them.
func (s *Store) Load(ctx context.Context) error {
	for _, sc := range lua.All {
		if err := sc.Load(ctx, s.c).Err(); err != nil {
			return fmt.Errorf("load script: %w", err)
		}
	}
	return nil
}

// RemainingStock returns the units Redis will still admit for voucher v:
// the sum over its buckets, units being moved between them included;
// found is false when Redis does not know the voucher.
func (s *Store) RemainingStock(ctx context.Context, v int64) (n int64, found bool, err error) {
	l, err := s.layoutOf(ctx, v)
	if err != nil {
		return 0, false, err
	}
	st, err := s.readStocks(ctx, v, l.Span())
	if err != nil {
		return 0, false, err
	}
	return st.total(), st.found, nil
}

// userBucket is the bucket deciding user's claims of voucher v.
func (s *Store) userBucket(ctx context.Context, v int64, user string) (bucket, error) {
	n, err := s.bucketsOf(ctx, v)
	if err != nil {
		return bucket{}, err
	}
	return s.userBucketOf(v, user, n), nil
}

// UserCount returns how many orders of voucher v Redis counts for user.
func (s *Store) UserCount(ctx context.Context, v int64, user string) (int64, error) {
	b, err := s.userBucket(ctx, v, user)
	if err != nil {
		return 0, err
	}
	n, err := s.c.HGet(ctx, b.Key(), userField(user)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

func partitionsOf(buckets []bucket) []int {
	ps := make([]int, len(buckets))
	for i, b := range buckets {
		ps[i] = b.P
	}
	return ps
}
