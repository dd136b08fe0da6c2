package persist

import (
	"cmp"
	"fmt"
	"time"

	"github.com/flashsale/flashsale/pkg/backoff"
)

// Defaults of Config: one constant per field, used when the field is zero.
const (
	BatchSizeDefault       = 500
	BlockDefault           = time.Second
	DrainTimeoutDefault    = 10 * time.Second
	RetryBackoffDefault    = 100 * time.Millisecond
	TakeoverMinIdleDefault = 30 * time.Second
	MaxAttemptsDefault     = 10
	maxBatchSize           = 10_000
)

// Config tunes a worker. Zero values take the defaults; Validate refuses
// values that are set but wrong.
type Config struct {
	// BatchSize is the most orders persisted in one transaction, and about
	// the most read at a time per partition: a read takes whole stream
	// entries (XREADGROUP COUNT), each the orders of one admission call,
	// as many as held BatchSize orders at the worker's last read.
	// Default 500: a commit per 500 orders drains about half as fast again
	// as one per 100 (the benchmark's drain rows).
	BatchSize int `envconfig:"FLASHSALE_WORKER_BATCH_SIZE" default:"500"`
	// Block is how long a read waits for new entries (XREADGROUP BLOCK); it
	// also bounds how long shutdown waits for a read. Default 1s.
	Block time.Duration `envconfig:"FLASHSALE_WORKER_BLOCK" default:"1s"`
	// Consumer names this process in the group. SetDefaults leaves it:
	// the worker binary fills an empty one with the host name, the reaper
	// with reaper-<host>-<pid>-<random>; a caller of the library names its own.
	Consumer string `envconfig:"FLASHSALE_CONSUMER_NAME"`
	// DrainTimeout bounds finishing the batch in hand after shutdown begins.
	DrainTimeout time.Duration `envconfig:"FLASHSALE_WORKER_DRAIN_TIMEOUT" default:"10s"`
	// RetryBackoff is the first pause after a failure; it doubles up to 5s.
	RetryBackoff time.Duration `envconfig:"FLASHSALE_WORKER_RETRY_BACKOFF" default:"100ms"`
	// TakeoverMinIdle is how long an entry may sit unacknowledged before the
	// reaper takes it over. A worker renews its hold on the batch in hand
	// every third of it. Default 30s.
	TakeoverMinIdle time.Duration `envconfig:"FLASHSALE_TAKEOVER_MIN_IDLE" default:"30s"`
	// MaxAttempts bounds the attempts at one batch while MySQL accepts
	// writes. A batch still failing then is tried entry by entry, and an
	// entry failing alone is left to the reaper (its delivery count and
	// FLASHSALE_MAX_DELIVERIES). While MySQL refuses writes (read-only,
	// disk full, down) attempts go on without bound. Default 10.
	MaxAttempts int `envconfig:"FLASHSALE_WORKER_MAX_ATTEMPTS" default:"10"`
}

// SetDefaults fills the zero fields with the defaults.
func (c *Config) SetDefaults() {
	c.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	c.Block = cmp.Or(c.Block, BlockDefault)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, DrainTimeoutDefault)
	c.RetryBackoff = cmp.Or(c.RetryBackoff, RetryBackoffDefault)
	c.TakeoverMinIdle = cmp.Or(c.TakeoverMinIdle, TakeoverMinIdleDefault)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, MaxAttemptsDefault)
}

// Validate reports the first wrong value, naming its variable. Call it
// after SetDefaults.
func (c *Config) Validate() error {
	switch {
	case c.BatchSize < 1 || c.BatchSize > maxBatchSize:
		return fmt.Errorf("FLASHSALE_WORKER_BATCH_SIZE must be 1..%d, got %d", maxBatchSize, c.BatchSize)
	case c.Block < time.Millisecond:
		return fmt.Errorf("FLASHSALE_WORKER_BLOCK must be at least 1ms, got %s", c.Block)
	case c.DrainTimeout <= 0:
		return fmt.Errorf("FLASHSALE_WORKER_DRAIN_TIMEOUT must be positive, got %s", c.DrainTimeout)
	case c.RetryBackoff <= 0 || c.RetryBackoff > backoff.MaxDefault:
		return fmt.Errorf("FLASHSALE_WORKER_RETRY_BACKOFF must be in (0, %s], got %s", backoff.MaxDefault, c.RetryBackoff)
	case c.TakeoverMinIdle < 3*time.Millisecond:
		return fmt.Errorf("FLASHSALE_TAKEOVER_MIN_IDLE must be at least 3ms, got %s", c.TakeoverMinIdle)
	case c.Block >= c.TakeoverMinIdle/3:
		// A read blocks the loop that renews the worker's liveness key
		// (rdb.ConsumerAliveTTL, a minute), and shutdown waits for it:
		// a third of TakeoverMinIdle (10 s by default) keeps it well within
		// both. (A batch in hand is held by its lease, not by reads.)
		return fmt.Errorf("FLASHSALE_WORKER_BLOCK (%s) must be below a third of FLASHSALE_TAKEOVER_MIN_IDLE (%s)", c.Block, c.TakeoverMinIdle)
	case c.MaxAttempts < 1:
		return fmt.Errorf("FLASHSALE_WORKER_MAX_ATTEMPTS must be at least 1, got %d", c.MaxAttempts)
	}
	return nil
}
