package rdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Durability modes: what an admission (or an operator's write) must reach
// before it is acknowledged (FLASHSALE_REDIS_DURABILITY).
const (
	// DurabilityNone acknowledges what the master wrote: a failover to a
	// replica that lagged loses it (docs/FAILURES.md).
	DurabilityNone = "none"
	// DurabilityReplica waits until MinReplicas replicas have the write
	// (WAIT), once per pipeline flush to each master.
	DurabilityReplica = "replica"
	// DurabilityReplicaAOF waits until MinReplicas replicas have also
	// fsynced it to their AOF (WAITAOF, Redis 7.2 or later).
	DurabilityReplicaAOF = "replica_aof"
)

// ErrNotReplicated says that the write was made on the master but fewer than the
// required replicas acknowledged it within the wait timeout. It may yet
// survive (the master lives, or a replica that had it is promoted) or not:
// the answer is ambiguous, like a timeout (503; a retry with the same
// Idempotency-Key resolves it).
var ErrNotReplicated = errors.New("not acknowledged by enough replicas in time")

// The defaults of FLASHSALE_REDIS_MIN_REPLICAS and
// FLASHSALE_REDIS_WAIT_TIMEOUT (each role that writes reads them).
const (
	MinReplicasDefault = 1
	WaitTimeoutDefault = 100 * time.Millisecond
)

// Durability is what a write must reach before it is acknowledged.
type Durability struct {
	Mode        string        // DurabilityNone (""), DurabilityReplica or DurabilityReplicaAOF
	MinReplicas int           // replicas that must have it (at least 1 when waiting)
	Timeout     time.Duration // how long to wait for them
}

// Waits reports whether a write waits for replicas.
func (d Durability) Waits() bool {
	return d.Mode == DurabilityReplica || d.Mode == DurabilityReplicaAOF
}

// Validate reports a mode or bound flashsale cannot use, naming its variable.
func (d Durability) Validate() error {
	switch d.Mode {
	case "", DurabilityNone:
		return nil
	case DurabilityReplica, DurabilityReplicaAOF:
	default:
		return fmt.Errorf("FLASHSALE_REDIS_DURABILITY must be none, replica or replica_aof, got %q", d.Mode)
	}
	if d.MinReplicas < 1 {
		return fmt.Errorf("FLASHSALE_REDIS_MIN_REPLICAS must be at least 1, got %d", d.MinReplicas)
	}
	if d.Timeout <= 0 {
		return fmt.Errorf("FLASHSALE_REDIS_WAIT_TIMEOUT must be positive, got %s", d.Timeout)
	}
	return nil
}

// SetDurability makes the store's admissions and operator writes wait for
// d (call it before the store is used).
func (s *Store) SetDurability(d Durability) error {
	if err := d.Validate(); err != nil {
		return err
	}
	s.durability = d
	return nil
}

// Durability is what a write must reach before it is done
// (SetDurability).
func (s *Store) Durability() Durability { return s.durability }

// CheckDurability asks every master whether it can give the durability
// set: WAITAOF needs Redis 7.2 or later.
func (s *Store) CheckDurability(ctx context.Context) error {
	if s.durability.Mode != DurabilityReplicaAOF {
		return nil
	}
	check := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return fmt.Errorf("read the Redis version: %w", err)
		}
		v := infoField(info, "redis_version")
		if !atLeast(v, 7, 2) {
			return fmt.Errorf("FLASHSALE_REDIS_DURABILITY=replica_aof needs WAITAOF, Redis 7.2 or later; %s runs Redis %s (use replica)", c.Options().Addr, v)
		}
		return nil
	}
	if cc, ok := s.c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, check)
	}
	c, ok := s.c.(*redis.Client)
	if !ok {
		return fmt.Errorf("durability: unexpected client %T", s.c)
	}
	return check(ctx, c)
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// atLeast reports whether version "major.minor.patch" is at least major.minor.
func atLeast(version string, major, minor int) bool {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// QueueWait adds the wait for the replicas to pipe, after its writes: WAIT
// (or WAITAOF) counts the replicas that have every write this connection
// made. Nil when the store does not wait.
func (s *Store) QueueWait(ctx context.Context, pipe redis.Pipeliner) *redis.Cmd {
	d := s.durability
	ms := max(d.Timeout.Milliseconds(), 1)
	switch d.Mode {
	case DurabilityReplica:
		return pipe.Do(ctx, "WAIT", d.MinReplicas, ms)
	case DurabilityReplicaAOF:
		return pipe.Do(ctx, "WAITAOF", 0, d.MinReplicas, ms)
	}
	return nil
}

// Replicated reads a queued wait's answer: nil when enough replicas had
// the writes, ErrNotReplicated when too few did, the error of the wait
// itself otherwise.
func (s *Store) Replicated(cmd *redis.Cmd) error {
	if cmd == nil {
		return nil
	}
	v, err := cmd.Result()
	if err != nil {
		return fmt.Errorf("wait for replicas: %w", err)
	}
	var n int64
	switch r := v.(type) {
	case int64: // WAIT
		n = r
	case []any: // WAITAOF: {local, replicas}
		if len(r) == 2 {
			n, _ = r[1].(int64)
		}
	}
	if n < int64(s.durability.MinReplicas) {
		return fmt.Errorf("%w: %d of %d replicas", ErrNotReplicated, n, s.durability.MinReplicas)
	}
	return nil
}

// WaitWritten waits until the replicas of the masters holding partitions
// have every write made there so far: for an operator's write, made on
// connections of the pool, a new write on one connection (the
// partition's wait key) followed by WAIT on it covers every write before
// it, as a master replicates in order.
func (s *Store) WaitWritten(ctx context.Context, partitions ...int) error {
	if !s.durability.Waits() {
		return nil
	}
	seen := map[string]bool{}
	for _, p := range partitions {
		c, addr, err := s.nodeOf(ctx, StreamKey(p))
		if err != nil {
			return err
		}
		if seen[addr] {
			continue
		}
		seen[addr] = true
		pipe := c.Pipeline()
		pipe.Set(ctx, waitKey(p), time.Now().UnixMilli(), time.Hour)
		wait := s.QueueWait(ctx, pipe)
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("wait for replicas of %s: %w", addr, err)
		}
		if err := s.Replicated(wait); err != nil {
			return err
		}
	}
	return nil
}

// nodeOf is the client of the server that holds key: the store's own
// client, or on a cluster the client of the key's master (a pipeline on
// it is one connection, which WAIT needs).
func (s *Store) nodeOf(ctx context.Context, key string) (redis.Cmdable, string, error) {
	if cc, ok := s.c.(*redis.ClusterClient); ok {
		n, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return nil, "", fmt.Errorf("master of %s: %w", key, err)
		}
		return n, n.Options().Addr, nil
	}
	return s.c, "", nil
}
