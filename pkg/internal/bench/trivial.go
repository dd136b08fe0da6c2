package bench

import (
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/flashsale/flashsale/pkg/app"
)

// ServeTrivial serves the HTTP ceiling's handler: a small JSON body, as
// plain as net/http allows. It runs in a process of its own, like the
// gateway. opsAddr, if set, serves what the gateway's ops listener serves
// for the bench to read the same way from both: /metrics with the
// runtime's collector (the scheduler's counts among it) and
// /debug/pprof/, on a listener of its own so that the handler measured
// stays bare.
func ServeTrivial(addr, opsAddr string) error {
	body := []byte(`{"order_id":"412300000000001","status":"pending"}` + "\n")
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write(body)
	})
	if opsAddr != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(app.RuntimeCollector())
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		ol, err := net.Listen("tcp", opsAddr)
		if err != nil {
			return err
		}
		go func() { _ = http.Serve(ol, mux) }()
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return http.Serve(l, h)
}
