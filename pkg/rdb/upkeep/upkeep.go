// Package upkeep is what the reaper and an operator do to the order
// streams besides persisting them: taking over entries a consumer left
// pending (XAUTOCLAIM), removing consumers that are gone, reading,
// trimming and deleting dead letters, exporting the streams' gauges, and
// keeping the users' indexes of admissions to the orders still in the
// streams (Indexes).
//
// The claim path never calls it. The keys, the scripts and the formats of
// a stream entry and of a dead letter stay pkg/rdb's (keys.go, stream.go,
// deadletters.go); upkeep works through an rdb.Store.
package upkeep

import (
	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/pkg/rdb"
)

// Streams does the upkeep of a Store's streams.
type Streams struct{ s *rdb.Store }

// New returns the upkeep of s's streams.
func New(s *rdb.Store) *Streams { return &Streams{s: s} }

func (u *Streams) client() redis.UniversalClient { return u.s.Client() }
