package gateway

// WithPruneClock replaces the monotonic clock of sold-out pruning
// (nanoseconds), for tests.
func WithPruneClock(now func() int64) Option { return withPruneClock(now) }
