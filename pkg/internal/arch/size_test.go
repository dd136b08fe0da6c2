package arch_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// shippedLines counts a Go file's lines of code: neither blank nor a
// comment alone.
func shippedLines(t *testing.T, path string) int {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	n := 0
	for _, l := range strings.Split(string(raw), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "//") {
			n++
		}
	}
	return n
}

// gateway.go is the Gateway, its options, New and Close: the routes,
// the shedding, the serving and the replies each have a file of their
// own (it had grown to 640 lines of all of them). The package is the
// buyers' HTTP API: the operator's is pkg/gateway/operator, the answers
// both give pkg/gateway/httpapi (it had grown to 2,870 lines with the
// operator's inside).
func TestTheGatewaysFilesKeepToOneJobEach(t *testing.T) {
	dir := filepath.Join("..", "..", "gateway")
	require.Less(t, shippedLines(t, filepath.Join(dir, "gateway.go")), 300, "gateway.go")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	total := 0
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			total += shippedLines(t, f)
		}
	}
	t.Logf("pkg/gateway: %d shipped lines", total)
	require.Less(t, total, 2500, "pkg/gateway's shipped lines")
}
