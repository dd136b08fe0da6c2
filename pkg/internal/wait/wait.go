// Package wait waits for a condition, with a deadline, never for a
// time. On two shared cores a sleep is too short one
// day and the test fails; a condition waited on holds whenever it comes.
// It imports nothing of the project, so any test package can use it.
package wait

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// every is how often a condition is asked again.
const every = 20 * time.Millisecond

// For polls cond every 20 ms until it holds, and fails t naming what it
// waited for if timeout passes first.
func For(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := Until(context.Background(), timeout, what, func() (bool, string) { return cond(), "" }); err != nil {
		t.Fatal(err)
	}
}

// Until polls cond every 20 ms until it holds, and returns an error
// naming what it waited for and cond's last word (why it did not hold)
// if timeout passes or ctx ends first. It fails no test: it serves a
// wait off the test goroutine, where t.Fatal does not stop the test, a
// wait with its own diagnosis, and the benchmarks.
func Until(ctx context.Context, timeout time.Duration, what string, cond func() (ok bool, why string)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return nil
		}
		if why != "" {
			why = ": " + why
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s%s", timeout, what, why)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s%s: %w", what, why, ctx.Err())
		case <-time.After(every):
		}
	}
}
