package gateway

// Access codes' HTTP side (pkg/access): a claim's or a room join's code,
// verified here without Redis, and the admin API that issues them.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/flashsale/flashsale/pkg/access"
	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/rdb"
)

// accessKey is FLASHSALE_ACCESS_KEY, or one derived from the admin token.
func (c *Config) accessKey() []byte { return c.keyOr(c.AccessKey, "flashsale access-code key") }

var (
	errAccessRequired = httpapi.NewError(http.StatusForbidden, "access_required",
		"this voucher is open to invited users only for now: send your access code in "+access.Header)
	errAccessInvalid = httpapi.NewError(http.StatusForbidden, "access_invalid",
		"the access code is not yours for this voucher: a code names one user and one voucher")
)

// claimAccess verifies the access code of user's claim (or join) of
// voucher, if it carries one. A code that is not the user's is refused
// only where the voucher needs one now, which the script decides: an
// open sale, or one past its codes' until, takes the claim whatever its
// code says.
func (g *Gateway) claimAccess(r *http.Request, user string, voucher int64) rdb.AccessCode {
	code := httpapi.HeaderValue(r, access.Header)
	switch {
	case code == "":
		return rdb.NoAccessCode
	case g.access.Valid(code, voucher, user):
		return rdb.AccessCodeValid
	}
	return rdb.AccessCodeInvalid
}

// WriteAccessCodes reads user ids from in, one a line (blank lines
// skipped), and writes "user,code" lines of their codes for voucher to
// out, under cfg's access key (FLASHSALE_ACCESS_KEY, or the admin
// token's): the command line's way to issue a million codes, streamed
// (WriteUserLines says how a bad line ends it).
func WriteAccessCodes(cfg *Config, voucher int64, in io.Reader, out io.Writer) (int, error) {
	codes := access.New(cfg.accessKey())
	return WriteUserLines(in, out, func(b []byte, user string) ([]byte, error) {
		return codes.AppendCode(b, voucher, user), nil
	})
}

// WriteUserLines reads user ids from in, one a line (blank lines
// skipped), and writes a "user,VALUE" line for each to out, VALUE what
// value appends. It stops at the first line that is not a user id (one
// over 64 KiB included), naming its number, or at value's first error,
// and returns how many lines it wrote: out holds only whole lines, those
// of the ids before it.
func WriteUserLines(in io.Reader, out io.Writer, value func(b []byte, user string) ([]byte, error)) (int, error) {
	const flushAt = 64 << 10
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 4096), maxAccessLine)
	buf := make([]byte, 0, flushAt+1024)
	n, written, no := 0, 0, 0
	flush := func() error {
		_, err := out.Write(buf)
		buf, written = buf[:0], n
		return err
	}
	stop := func(err error) (int, error) {
		ferr := flush()
		return written, errors.Join(err, ferr)
	}
	for sc.Scan() {
		no++
		user := strings.TrimSpace(sc.Text())
		if user == "" {
			continue
		}
		if !httpapi.ValidUser(user) {
			return stop(fmt.Errorf("line %d: %q is not a user id (1-64 characters of A-Z a-z 0-9 _ . @ -)", no, cut(user, 80)))
		}
		line := append(append(buf, user...), ',')
		line, err := value(line, user)
		if err != nil {
			return stop(fmt.Errorf("line %d: %w", no, err))
		}
		buf = append(line, '\n')
		n++
		if len(buf) >= flushAt {
			if err := flush(); err != nil {
				return written, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("line %d: over %d KiB, not a user id", no+1, maxAccessLine>>10)
		}
		return stop(err)
	}
	return n, flush()
}

// maxAccessLine bounds a line of WriteAccessCodes' input.
const maxAccessLine = 64 << 10

// cut is s cut to at most n bytes, for an error message.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
