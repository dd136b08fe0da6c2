// Package wait waits for a condition, with a deadline, never for a
// time. On two shared cores a sleep is too short one
// day and the test fails; a condition waited on holds whenever it comes.
// It imports nothing of the project, so any test package can use it.
package wait

import (
	"testing"
	"time"
)

// For polls cond every 20 ms until it holds, and fails t naming what it
// waited for if timeout passes first.
func For(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
