package harness_test

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/flashsale/flashsale/pkg/internal/harness"
)

// TestMain removes the binaries harness.Build compiled once for all the
// tests, and the mariadbd their stacks shared.
//
// The tests that mostly wait, for a failover, a freeze, a timeout or a
// server coming back, call t.Parallel (marked "it mostly waits"): go test
// runs them after the others, one more at a time than there are cores
// (unless -parallel is given), so that one's waits are spent on another's
// work; on two cores the default, two, left a core idle through most of
// their waits. Those that measure a rate, memory or a crowd's order run
// alone.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(runtime.GOMAXPROCS(0)+1)); err != nil {
			panic(err)
		}
	}
	code := m.Run()
	harness.RemoveBuilds()
	os.Exit(code)
}
