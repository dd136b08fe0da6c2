package gateway

// A request framed with Transfer-Encoding is refused whatever its HTTP
// version. Go's server drops the header of an HTTP/1.0 request before a
// handler can see it (and reads the body by Content-Length, or not at
// all), while a proxy in front may have framed the same bytes as chunked:
// the chunks would be served as the next request. So each connection's
// first request head is read for the header as it arrives, and an
// HTTP/1.0 request is served only as its connection's first and last.

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
)

// framedListener hands out connections that read their first request
// head for a Transfer-Encoding header.
type framedListener struct{ net.Listener }

func (l framedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &framedConn{Conn: c}, nil
}

// framedConn reads its first request head as it passes: costs nothing
// once the head has passed.
type framedConn struct {
	net.Conn
	head   headScan
	result atomic.Uint32 // headScanned | headHTTP10 | headTE, once the head has passed
}

const (
	headScanned = 1 << iota
	headHTTP10
	headTE
)

func (c *framedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.result.Load() == 0 && n > 0 {
		if c.head.scan(p[:n]) {
			r := uint32(headScanned)
			if c.head.http10 {
				r |= headHTTP10
			}
			if c.head.te {
				r |= headTE
			}
			c.result.Store(r)
		}
	}
	return n, err
}

// headScan follows a request head byte by byte: the request line's
// version, and whether a header line is named Transfer-Encoding.
type headScan struct {
	line       int     // the line being read; 0 is the request line
	col        int     // bytes of it read, CR aside
	match      int     // bytes of "transfer-encoding:" matched at its start; -1 none
	tail       [9]byte // the request line's last bytes, CR aside
	http10, te bool
}

const teName = "transfer-encoding:"

// scan reads b, and reports whether the head has ended.
func (h *headScan) scan(b []byte) bool {
	for _, c := range b {
		switch {
		case c == '\n':
			if h.line == 0 {
				h.http10 = string(h.tail[:]) == " HTTP/1.0"
			} else if h.col == 0 {
				return true
			}
			h.line, h.col, h.match = h.line+1, 0, 0
			continue
		case c == '\r':
			continue
		case h.line == 0:
			copy(h.tail[:], h.tail[1:])
			h.tail[len(h.tail)-1] = c
		case h.match >= 0 && h.match < len(teName):
			if c|0x20 == teName[h.match] { // every byte of teName has 0x20 set: this folds case alone
				h.match++
				h.te = h.te || h.match == len(teName)
			} else {
				h.match = -1
			}
		}
		h.col++
	}
	return false
}

type framedKey struct{}

// framedContext keeps a framedConn in its requests' contexts
// (http.Server.ConnContext).
func framedContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framedConn); ok {
		return context.WithValue(ctx, framedKey{}, fc)
	}
	return ctx
}

// http10Framing is the refusal of r, an HTTP/1.0 request, or nil to
// serve it (the connection then closes after the answer): a
// Transfer-Encoding header refuses it, and so does being anything but
// its connection's first request (its head was not read), or a
// connection not read at all.
func http10Framing(r *http.Request) *httpapi.Error {
	fc, _ := r.Context().Value(framedKey{}).(*framedConn)
	if fc == nil {
		return errLengthRequired
	}
	res := fc.result.Load()
	switch {
	case res&headTE != 0:
		return errLengthRequired
	case res&headHTTP10 == 0:
		return errHTTP10Later
	}
	return nil
}

var errHTTP10Later = httpapi.NewError(http.StatusHTTPVersionNotSupported, "http_version",
	"an HTTP/1.0 request is served only as its connection's first: open a new connection, or use HTTP/1.1")
