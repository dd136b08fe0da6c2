package claimid_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/gateway/claimid"
	"github.com/flashsale/flashsale/pkg/rdb/admission"
)

// An id reads back as the claim it names, for its user and voucher only;
// an id of a gateway before serials too, its horizon taken the outcome
// timeout after its time; and no id is another's.
func TestAnIDReadsBackAsItsClaimOnly(t *testing.T) {
	s := claimid.New([]byte("key"), 30*time.Second)
	for _, ref := range []admission.ClaimRef{
		{VoucherID: 7, UserID: "ann", MS: 1790000000123, Serial: 0xbeef, Horizon: 1790000031000},
		{VoucherID: 7, UserID: "ann", MS: 1790000000123, Serial: 0xbeef, Horizon: 1790000031000, Key: "press.1"},
		{VoucherID: 7, UserID: "ann", MS: 1790000000123, Horizon: 1790000030123},               // before serials
		{VoucherID: 7, UserID: "ann", MS: 1790000000123, Horizon: 1790000030123, Key: "k-1.2"}, // before serials, keyed
	} {
		id := s.ID(ref)
		got, err := s.Parse(id, ref.UserID, ref.VoucherID)
		require.NoError(t, err, id)
		require.Equal(t, ref, got, id)
		_, err = s.Parse(id, "bob", ref.VoucherID)
		require.ErrorIs(t, err, claimid.ErrNotYours, id)
		_, err = s.Parse(id, ref.UserID, 8)
		require.ErrorIs(t, err, claimid.ErrNotYours, id)
		_, err = claimid.New([]byte("another key"), 30*time.Second).Parse(id, ref.UserID, ref.VoucherID)
		require.ErrorIs(t, err, claimid.ErrNotYours, id)
	}
	twin := admission.ClaimRef{VoucherID: 7, UserID: "ann", MS: 1790000000123, Serial: 0xbeee, Horizon: 1790000031000}
	require.NotEqual(t, s.ID(twin), s.ID(admission.ClaimRef{VoucherID: 7, UserID: "ann", MS: 1790000000123, Serial: 0xbeef, Horizon: 1790000031000}))
	for _, bad := range []string{"", "1", "x.y", "1.2.3", "1.2.0." + mac, "1.2.0bee." + mac, "1.2.BEE." + mac, "1.-2.bee." + mac, "+1.2.bee." + mac,
		"1.2.bee." + mac + ".bad key", "1.2.bee.xyz", "1234567890123456.2.bee." + mac} {
		_, err := s.Parse(bad, "ann", 7)
		require.ErrorIs(t, err, claimid.ErrMalformed, "%q", bad)
	}
}

const mac = "0123456789abcdef0123456789abcdef"
