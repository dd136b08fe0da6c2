package harness_test

import (
	"os"
	"testing"

	"github.com/flashsale/flashsale/pkg/internal/harness"
)

// TestMain removes the binaries harness.Build compiled once for all the
// tests, and the mariadbd their stacks shared.
//
// The tests that mostly wait, for a failover, a freeze, a timeout or a
// server coming back, call t.Parallel (marked "it mostly waits"): go test
// runs them after the others, two at a time on two cores (-parallel is
// GOMAXPROCS), so that one's waits are spent on another. Those that
// measure a rate, memory or a crowd's order run alone.
func TestMain(m *testing.M) {
	code := m.Run()
	harness.RemoveBuilds()
	os.Exit(code)
}
