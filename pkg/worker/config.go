package worker

import "github.com/flashsale/flashsale/pkg/persist"

// Config tunes a worker (FLASHSALE_WORKER_*, FLASHSALE_TAKEOVER_MIN_IDLE,
// FLASHSALE_CONSUMER_NAME). It is persist.Config: the reaper processes the
// entries it takes over with the same settings and the same code.
type Config = persist.Config
