package event_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/event"
	"github.com/flashsale/flashsale/pkg/internal/testsink"
)

// The receiver docs/EVENTS.md gives users ("Verifying a delivery") is
// compiled as written and accepts what the webhook sink signs, refusing a
// changed body, a wrong secret and an old timestamp.
func TestTheDocumentedReceiverVerifiesTheSignature(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the documented receiver")
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "EVENTS.md"))
	require.NoError(t, err)
	m := regexp.MustCompile("(?s)## Verifying a delivery.*?```go\n(.*?)```").FindSubmatch(doc)
	require.NotNil(t, m, "docs/EVENTS.md has a Go receiver under \"Verifying a delivery\"")
	key, err := event.SecretKey(testsink.Secret)
	require.NoError(t, err)
	body := []byte(`{"specversion":"1.0","id":"7.0","type":"order.paid"}`)
	now := time.Now()
	ts := strconv.FormatInt(now.Unix(), 10)
	sig := "v1," + event.Sign(key, "7.0", ts, body)
	old := strconv.FormatInt(now.Add(-time.Hour).Unix(), 10)
	oldSig := "v1," + event.Sign(key, "7.0", old, body)

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module receiver\n\ngo 1.22\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "receiver.go"), m[1], 0o644))
	check := fmt.Sprintf(`package receiver

import (
	"net/http"
	"testing"
	"time"
)

func TestVerify(t *testing.T) {
	h := func(ts, sig string) http.Header {
		return http.Header{"Webhook-Id": {"7.0"}, "Webhook-Timestamp": {ts}, "Webhook-Signature": {"v1,bm90IGl0 " + sig}}
	}
	body := []byte(%q)
	if err := Verify(%q, h(%q, %q), body, time.Now()); err != nil {
		t.Fatalf("a signed delivery: %%v", err)
	}
	if Verify(%q, h(%q, %q), append(body, ' '), time.Now()) == nil {
		t.Fatal("a changed body verified")
	}
	if Verify("whsec_"+"c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0", h(%q, %q), body, time.Now()) == nil {
		t.Fatal("another secret verified")
	}
	if Verify(%q, h(%q, %q), body, time.Now()) == nil {
		t.Fatal("an hour-old timestamp verified")
	}
}
`, body, testsink.Secret, ts, sig, testsink.Secret, ts, sig, ts, sig, testsink.Secret, old, oldSig)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "receiver_test.go"), []byte(check), 0o644))
	cmd := exec.Command("go", "test", "-count=1", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
}
