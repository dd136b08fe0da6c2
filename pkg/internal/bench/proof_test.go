package bench

import "testing"

// The bench's proof-of-work row verifies real solutions (its figure is
// make bench's, not this test's).
func TestProofCheckVerifiesRealSolutions(t *testing.T) {
	pc := proofCheck(50)
	if pc.VerifyFailure != "" || pc.CPUMicros <= 0 || pc.Checks != 50 {
		t.Fatalf("%+v", pc)
	}
}
