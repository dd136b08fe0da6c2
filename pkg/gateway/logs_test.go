package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
)

// A serving gateway logs its claims by outcome (README: "each process
// logs its counts every 10 s"): over 320,000 claims it logged none.
func TestAGatewayLogsItsClaimCounts(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"x","stock":1}`)
	core, logs := observer.New(zapcore.InfoLevel)
	addr := serveGateway(t, f, zap.New(core), gateway.WithCountsEvery(20*time.Millisecond))
	for _, u := range []string{"ann", "ben"} {
		req, err := http.NewRequest("POST", "http://"+addr+"/v1/vouchers/"+id+"/orders", strings.NewReader(""))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+f.token(u))
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
	}
	sum := func() map[string]int64 {
		got := map[string]int64{}
		for _, e := range logs.FilterMessage("claims").All() {
			require.Equal(t, zapcore.InfoLevel, e.Level)
			for k, v := range e.ContextMap() {
				if n, ok := v.(int64); ok {
					got[k] += n
				}
			}
		}
		return got
	}
	testenv.Eventually(t, 10*time.Second, "both claims in the lines", func() bool { return len(sum()) >= 2 })
	got := sum()
	require.Equal(t, int64(1), got["admitted"])
	require.Equal(t, int64(1), got["rejected:sold_out"])
}
