package bench

import (
	"net"
	"net/http"
	"strconv"
)

// ServeTrivial serves the HTTP ceiling's handler: a small JSON body, as
// plain as net/http allows. It runs in a process of its own, like the gateway.
func ServeTrivial(addr string) error {
	body := []byte(`{"order_id":"412300000000001","status":"pending"}` + "\n")
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write(body)
	})
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return http.Serve(l, h)
}
