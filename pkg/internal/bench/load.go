// Package bench measures flashsale on this machine: the ceilings of HTTP
// and Redis, the gateway's admission throughput and latency, the workers'
// drain rate, an end-to-end sale and peak memory (make bench).
package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// conn is a keep-alive HTTP/1.1 connection that sends pre-rendered
// requests and reads only the status line, headers and body length: cheap
// enough that the load generator does not starve the server it measures on
// a 2-core machine. (net/http's client costs several times more CPU per
// request.) The same client drives every HTTP measurement, so ratios are fair.
type conn struct {
	addr string
	c    net.Conn
	r    *bufio.Reader
}

func (k *conn) do(req []byte) (status int, body []byte, err error) {
	for attempt := 0; attempt < 2; attempt++ {
		if k.c == nil {
			if k.c, err = net.DialTimeout("tcp", k.addr, 5*time.Second); err != nil {
				return 0, nil, err
			}
			k.r = bufio.NewReaderSize(k.c, 16<<10)
		}
		_ = k.c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err = k.c.Write(req); err == nil {
			status, body, err = k.read()
			if err == nil {
				return status, body, nil
			}
		}
		k.c.Close()
		k.c = nil
	}
	return 0, nil, err
}

func (k *conn) read() (int, []byte, error) {
	line, err := k.r.ReadSlice('\n')
	if err != nil {
		return 0, nil, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, nil, fmt.Errorf("bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, err
	}
	length := -1
	for {
		h, err := k.r.ReadSlice('\n')
		if err != nil {
			return 0, nil, err
		}
		if len(h) <= 2 {
			break
		}
		if len(h) > 16 && (h[0] == 'C' || h[0] == 'c') && bytes.EqualFold(h[:15], []byte("Content-Length:")) {
			length, err = strconv.Atoi(string(bytes.TrimSpace(h[15:])))
			if err != nil {
				return 0, nil, err
			}
		}
	}
	if length < 0 {
		return 0, nil, errors.New("response without Content-Length")
	}
	body := make([]byte, length)
	_, err = io.ReadFull(k.r, body)
	return status, body, err
}

// Request renders a POST with an Authorization header and no body.
func Request(host, path, token string) []byte {
	return []byte("POST " + path + " HTTP/1.1\r\nHost: " + host + "\r\nAuthorization: Bearer " + token + "\r\nContent-Length: 0\r\n\r\n")
}

// Load describes one load run.
type Load struct {
	Addr        string        // host:port
	Conns       int           // connections (and in-flight requests at most)
	Duration    time.Duration // how long to send
	Rate        int           // open loop: requests per second; 0 = closed loop (each connection back to back)
	MaxRequests int64         // stop after this many (0 = no limit)
	// Next returns the i-th request to send.
	Next func(i int64) []byte
	// OnResponse, if set, sees every answer (from the connection's goroutine).
	OnResponse func(i int64, status int, body []byte)
	// Window, if > 0, also records throughput and p99 per window.
	Window time.Duration
}

// Result of a load run. Latencies are microseconds; in open loop they are
// measured from the intended send time, so queueing behind a stall counts.
type Result struct {
	Requests, Errors int64
	Status           map[int]int64
	Duration         time.Duration
	Latency          *hdrhistogram.Histogram
	Windows          []Window
}

// Window is one slice of a run.
type Window struct {
	At       time.Duration `json:"at_s"`
	Requests int64         `json:"requests"`
	P99us    int64         `json:"p99_us"`
}

// RPS is requests per second.
func (r *Result) RPS() float64 { return float64(r.Requests) / r.Duration.Seconds() }

// Drive sends the load and returns what it saw.
func Drive(l Load) *Result {
	res := &Result{Status: map[int]int64{}, Latency: hdrhistogram.New(1, 60_000_000, 3)}
	var (
		mu      sync.Mutex
		next    atomic.Int64
		wg      sync.WaitGroup
		winMu   sync.Mutex
		winHist = hdrhistogram.New(1, 60_000_000, 2)
		winN    int64
	)
	start := time.Now()
	end := start.Add(l.Duration)
	stopWin := make(chan struct{})
	winDone := make(chan struct{})
	go func() {
		defer close(winDone)
		if l.Window <= 0 {
			return
		}
		t := time.NewTicker(l.Window)
		defer t.Stop()
		last := start
		for {
			select {
			case <-stopWin:
				// The last, partial window, scaled to a whole one.
				winMu.Lock()
				if part := time.Since(last); winN > 0 && part > 0 {
					res.Windows = append(res.Windows, Window{At: time.Since(start).Round(time.Millisecond),
						Requests: int64(float64(winN) * float64(l.Window) / float64(part)), P99us: winHist.ValueAtQuantile(99)})
				}
				winMu.Unlock()
				return
			case now := <-t.C:
				last = now
				winMu.Lock()
				res.Windows = append(res.Windows, Window{At: now.Sub(start).Round(time.Millisecond), Requests: winN, P99us: winHist.ValueAtQuantile(99)})
				winN = 0
				winHist.Reset()
				winMu.Unlock()
			}
		}
	}()
	for range l.Conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := &conn{addr: l.Addr}
			defer func() {
				if k.c != nil {
					k.c.Close()
				}
			}()
			hist := hdrhistogram.New(1, 60_000_000, 3)
			status := map[int]int64{}
			var errs int64
			for {
				i := next.Add(1) - 1
				if l.MaxRequests > 0 && i >= l.MaxRequests {
					break
				}
				var intended time.Time
				if l.Rate > 0 {
					intended = start.Add(time.Duration(i) * time.Second / time.Duration(l.Rate))
					if intended.After(end) {
						break
					}
					if d := time.Until(intended); d > 0 {
						time.Sleep(d)
					}
				} else {
					intended = time.Now()
					if intended.After(end) {
						break
					}
				}
				st, body, err := k.do(l.Next(i))
				lat := time.Since(intended).Microseconds()
				_ = hist.RecordValue(lat)
				if l.Window > 0 {
					winMu.Lock()
					_ = winHist.RecordValue(lat)
					winN++
					winMu.Unlock()
				}
				if err != nil {
					errs++
					continue
				}
				status[st]++
				if l.OnResponse != nil {
					l.OnResponse(i, st, body)
				}
			}
			mu.Lock()
			res.Latency.Merge(hist)
			res.Errors += errs
			for s, n := range status {
				res.Status[s] += n
				res.Requests += n
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Duration = time.Since(start)
	close(stopWin)
	<-winDone
	res.Requests += res.Errors
	return res
}
