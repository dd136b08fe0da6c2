package harness_test

import (
	"os"
	"testing"

	"github.com/flashsale/flashsale/pkg/internal/harness"
)

// TestMain removes the binaries harness.Build compiled once for all the
// tests.
func TestMain(m *testing.M) {
	code := m.Run()
	harness.RemoveBuilds()
	os.Exit(code)
}
