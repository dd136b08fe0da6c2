package access_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/access"
)

// A code is its user's and its voucher's, under its key; nothing else
// passes, whatever its form.
func TestACodeNamesOneUserAndOneVoucher(t *testing.T) {
	c := access.New([]byte("key-key-key-key-key-key-key-key-key"))
	code := c.Code(7, "alice")
	require.Len(t, code, access.CodeLen)
	require.Equal(t, code, c.Code(7, "alice"), "made again the same")
	require.Equal(t, code, string(c.AppendCode(nil, 7, "alice")))
	require.True(t, c.Valid(code, 7, "alice"))
	require.False(t, c.Valid(code, 7, "bob"), "another user")
	require.False(t, c.Valid(code, 8, "alice"), "another voucher")
	require.False(t, c.Valid(code, 71, "alice"))
	// "7" + "1alice" must not be "71" + "alice": the two are separated.
	require.NotEqual(t, c.Code(7, "1alice"), c.Code(71, "alice"))
	require.False(t, access.New([]byte("another-key-another-key-another-key")).Valid(code, 7, "alice"), "another key")
	for _, bad := range []string{"", code[:len(code)-1], code + "A", "!!!!!!!!!!!!!!!!!!!!", code[:19] + "="} {
		require.False(t, c.Valid(bad, 7, "alice"), "%q", bad)
	}
}

func BenchmarkValid(b *testing.B) {
	c := access.New([]byte("admin-token-admin-token-admin-token"))
	code := c.Code(12345, "user-0001")
	b.ReportAllocs()
	for b.Loop() {
		if !c.Valid(code, 12345, "user-0001") {
			b.Fatal("refused")
		}
	}
}
