package rdb

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// Refusal is admit.lua's refusal of code as an error; nil for a code
// that is no refusal.
func Refusal(code int64) error { return admitErrors[code] }

// RefusalCode is the code of admit.lua's refusal that err is; false when
// err is none.
func RefusalCode(err error) (int64, bool) {
	for code, e := range admitErrors {
		if errors.Is(err, e) {
			return code, true
		}
	}
	return 0, false
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
	durability Durability
	// loaded is each partition's LoadedKey, built once.
	loaded []string
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
	s := &Store{c: client, partitions: partitions, group: group, loaded: make([]string, partitions)}
	for p := range partitions {
		s.loaded[p] = LoadedKey(p)
	}
	return s, nil
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
