package draw_test

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/draw"
)

func TestKeyIsTheDocumentedHash(t *testing.T) {
	seed, err := draw.ParseSeed("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")
	require.NoError(t, err)
	msg := append(seed[:], []byte("12345")...)
	want := sha256.Sum256(msg)
	require.Equal(t, want, seed.Key(12345))
	// The test vector of the package doc.
	k := seed.Key(12345)
	require.Equal(t, "6ba012c11e8f2d91071a509ff776bdf5fa3f79f77fe1b18d71e0ec6f28927aee", hex.EncodeToString(k[:]))
	c := sha256.Sum256(seed[:])
	require.Equal(t, hex.EncodeToString(c[:]), seed.Commitment())
	back, err := draw.ParseSeed(seed.Hex())
	require.NoError(t, err)
	require.Equal(t, seed, back)
	for _, bad := range []string{"", "zz", seed.Hex()[:62], seed.Hex() + "00"} {
		_, err := draw.ParseSeed(bad)
		require.ErrorIs(t, err, draw.ErrBadSeed, bad)
	}
}

// First keeps what sorting every entry would: the same first n, in order,
// whatever order the entries stream in.
func TestFirstIsTheHeadOfTheFullSort(t *testing.T) {
	seed := draw.NewSeed()
	ids := make([]int64, 5000)
	for i := range ids {
		ids[i] = int64(i)*7919 + 1
	}
	all := make([]draw.Ranked, len(ids))
	for i, id := range ids {
		all[i] = draw.Ranked{ID: id, Key: seed.Key(id)}
	}
	slices.SortFunc(all, func(a, b draw.Ranked) int {
		if draw.Before(a, b) {
			return -1
		}
		return 1
	})
	for _, n := range []int{0, 1, 10, 4999, 5000, 6000} {
		rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		f := draw.NewFirst(seed, n)
		for _, id := range ids {
			f.Add(id)
		}
		require.Equal(t, int64(len(ids)), f.Seen())
		require.Equal(t, all[:min(n, len(all))], f.Sorted(), "n=%d", n)
	}
	// Another seed, another order.
	other := draw.NewFirst(draw.NewSeed(), 10)
	for _, id := range ids {
		other.Add(id)
	}
	require.NotEqual(t, all[:10], other.Sorted())
}
