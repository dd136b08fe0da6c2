package harness_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/harness"
)

// reconciled is one voucher of `reaper reconcile --json`.
type reconciled struct {
	VoucherID   string `json:"voucher_id"`
	Differences []any  `json:"differences"`
}

// reconcile runs `reaper reconcile --json` (and args, such as --repair)
// and returns what it found per voucher.
func reconcile(t *testing.T, ctx context.Context, s *harness.Stack, args ...string) []reconciled {
	t.Helper()
	out, err := s.RunOutput(ctx, "reaper", append([]string{"reconcile", "--json"}, args...)...)
	require.NoError(t, err, out)
	var rec struct {
		Vouchers []reconciled `json:"vouchers"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rec), out)
	return rec.Vouchers
}
