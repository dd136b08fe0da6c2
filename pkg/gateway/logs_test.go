package gateway_test

import (
	"context"
	"net"
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
	gw, err := gateway.New(gateway.Config{AdminToken: admin, JWTSecret: secret, ClaimTimeout: 500 * time.Millisecond, UserRate: -1,
		SoldOutRefresh: -1, ShutdownTimeout: time.Second}, f.env.RDB, f.env.DB, zap.New(core), gateway.WithClock(f.clock.Now),
		gateway.WithCountsEvery(20*time.Millisecond))
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ctx, l) }()
	defer func() { cancel(); require.NoError(t, <-done) }()
	for _, u := range []string{"ann", "ben"} {
		req, err := http.NewRequest("POST", "http://"+l.Addr().String()+"/v1/vouchers/"+id+"/orders", strings.NewReader(""))
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
