package gateway

import (
	"net/http"
	"time"

	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/ratelimit"
)

// writeRateLimited answers 429 rate_limited with Retry-After.
func writeRateLimited(w http.ResponseWriter, wait time.Duration) {
	w.Header().Set("Retry-After", ratelimit.RetryAfter(wait))
	httpapi.WriteError(w, errRateLimited)
}
