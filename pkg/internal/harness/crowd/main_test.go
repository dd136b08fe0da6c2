package crowd_test

import (
	"os"
	"testing"

	"github.com/flashsale/flashsale/pkg/internal/harness"
)

// TestMain removes the binaries harness.Build compiled once for all the
// tests, and the mariadbd their stacks shared.
func TestMain(m *testing.M) {
	code := m.Run()
	harness.RemoveBuilds()
	os.Exit(code)
}
