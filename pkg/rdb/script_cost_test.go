package rdb_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashsale/flashsale/pkg/internal/testrdb"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
)

// BenchmarkAdmissionScript reports what admit.lua costs Redis per
// admission, in calls of 1, 8 and 32 claims sent one after another from
// one client: redis-server's main thread CPU (INFO cpu: the script and the
// call's network reads and writes) and the script alone (INFO
// commandstats, cmdstat_evalsha). Redis's own accounting: the figures do
// not depend on the client's speed, only on the machine's.
//
//	go test -run '^$' -bench AdmissionScript -benchtime 20000x ./pkg/rdb
func BenchmarkAdmissionScript(b *testing.B) {
	for _, per := range []int{1, 8, 32} {
		b.Run("claims-"+strconv.Itoa(per), func(b *testing.B) {
			s := newStore(b, 1)
			ctx := context.Background()
			seedVoucher(b, s, rdb.Voucher{ID: 1, Stock: 1 << 40, PerUserLimit: 1})
			n := 0
			horizon := admission.HorizonAfter(time.Now(), time.Hour)
			call := func() {
				claims := make([]admission.Claim, per)
				for i := range claims {
					claims[i] = admission.Claim{VoucherID: 1, UserID: "u" + strconv.Itoa(n), Now: t0, Day: d0,
						Serial: admission.NewSerial(), Horizon: horizon} // as the gateway sends them
					n++
				}
				if _, errs, err := testrdb.Admitter(s).AdmitMany(ctx, claims); err != nil || errs[0] != nil {
					b.Fatal(err, errs[0])
				}
			}
			for range 100 { // the script loaded, the hash grown a little
				call()
			}
			cpu0, script0 := redisCosts(b, s.Client())
			from := n
			b.ResetTimer()
			for n-from < b.N {
				call()
			}
			b.StopTimer()
			cpu1, script1 := redisCosts(b, s.Client())
			b.ReportMetric((cpu1-cpu0)/float64(n-from), "redis-µs/admission")
			b.ReportMetric((script1-script0)/float64(n-from), "script-µs/admission")
		})
	}
}

// redisCosts reads redis-server's main thread CPU and EVALSHA's time, in µs.
func redisCosts(b *testing.B, c redis.UniversalClient) (cpu, script float64) {
	ctx := context.Background()
	info, err := c.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		k, v, _ := strings.Cut(l, ":")
		switch k {
		case "used_cpu_sys_main_thread", "used_cpu_user_main_thread":
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f * 1e6
		case "cmdstat_evalsha":
			for _, kv := range strings.Split(v, ",") {
				if name, us, _ := strings.Cut(kv, "="); name == "usec" {
					f, _ := strconv.ParseFloat(us, 64)
					script = f
				}
			}
		}
	}
	return cpu, script
}
