package httpapi_test

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/flashsale/flashsale/pkg/access"
	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/proof"
	"github.com/flashsale/flashsale/pkg/room"
)

// HeaderValue looks a header up by its canonical key without
// canonicalising it: every key the gateway reads it by must be canonical,
// or the header would never be found.
func TestTheHeadersTheGatewayReadsAreCanonical(t *testing.T) {
	keys := map[string]string{"proof.Header": proof.Header, "access.Header": access.Header, "room.Header": room.Header}
	call := regexp.MustCompile(`HeaderValue\(r, ("([^"]*)"|[A-Za-z_.]+)\)`)
	files, err := filepath.Glob("../*.go")
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob("*.go")
	calls := 0
	for _, f := range append(files, more...) {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			calls++
			key := m[2]
			if m[2] == "" {
				var ok bool
				if key, ok = keys[m[1]]; !ok {
					t.Errorf("%s: HeaderValue by %s, a name this test does not know: add it to keys", f, m[1])
					continue
				}
			}
			if c := http.CanonicalHeaderKey(key); c != key {
				t.Errorf("%s: HeaderValue(r, %q): not canonical (%q)", f, key, c)
			}
		}
	}
	if calls < 6 {
		t.Fatalf("found %d calls of HeaderValue, want the gateway's (at least 6)", calls)
	}
	r, _ := http.NewRequest("POST", "/", nil)
	r.Header.Set("idempotency-key", "k1")
	if got := httpapi.HeaderValue(r, "Idempotency-Key"); got != "k1" {
		t.Fatalf("HeaderValue of a header set in lower case: %q, want k1", got)
	}
	if got := httpapi.HeaderValue(r, "Authorization"); got != "" {
		t.Fatalf("HeaderValue of a header not sent: %q", got)
	}
}
