package gateway

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A request head is read for its version and a Transfer-Encoding header
// whatever the reads it comes in, and only header names count.
func TestTheHeadScanFindsTransferEncodingHeadersOnly(t *testing.T) {
	for head, want := range map[string][2]bool{ // http10, te
		"POST /a HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n":                        {true, true},
		"POST /a HTTP/1.0\nTRANSFER-ENCODING: chunked\n\n":                              {true, true},
		"POST /a HTTP/1.1\r\nHost: x\r\ntransfer-encoding:chunked\r\n\r\n":              {false, true},
		"POST /transfer-encoding: HTTP/1.0\r\nHost: x\r\n\r\n":                          {true, false},
		"POST /a HTTP/1.0\r\nX-Transfer-Encoding: chunked\r\n\r\n":                      {true, false},
		"POST /a HTTP/1.0\r\nHost: transfer-encoding:\r\n\r\n":                          {true, false},
		"GET /a HTTP/1.1\r\n\r\nPOST /b HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n": {false, false},
	} {
		for _, step := range []int{1, 3, len(head)} {
			var h headScan
			ended := false
			for i := 0; i < len(head) && !ended; i += step {
				ended = h.scan([]byte(head[i:min(i+step, len(head))]))
			}
			require.True(t, ended, "%q in reads of %d", head, step)
			require.Equal(t, want, [2]bool{h.http10, h.te}, "%q in reads of %d", head, step)
		}
	}
}
