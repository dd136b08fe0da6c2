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
// runs them after the others, twice as many at a time as there are cores
// (unless -parallel is given), so that one's waits are spent on another's
// work. On two cores the default, two, left the cores 90 % idle through
// their waits (vmstat); at six, the harness alone took 296 s with the
// race detector, 368 s at three beside the other packages; but two copies
// of the suite at six each (load average 30 to 43 on two cores) made
// waits of a minute run out.
// Those that measure a rate, memory or a crowd's order run alone.
func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(2*runtime.GOMAXPROCS(0))); err != nil {
			panic(err)
		}
	}
	code := m.Run()
	harness.RemoveBuilds()
	os.Exit(code)
}
