package gateway

// Replies: errors mapped once, for every route (who asks is auth.go's).

import (
	"net/http"

	"go.uber.org/zap"

	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/ops"
)

// fail answers err, logging what is not the client's doing.
func (g *Gateway) fail(w http.ResponseWriter, r *http.Request, err error) {
	e := toAPIError(err)
	if e.Status >= 500 {
		g.log.Warn("request failed", append(ops.TraceFields(r.Context()),
			zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Error(err))...)
	}
	httpapi.WriteError(w, e)
}
