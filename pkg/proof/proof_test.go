package proof_test

import (
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	altcha "github.com/altcha-org/altcha-lib-go"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/proof"
)

var key = []byte("proof-of-work-key-proof-of-work-key!")

func TestASolutionIsAcceptedForItsUserUntilItExpires(t *testing.T) {
	now := time.Now()
	iss := proof.New(key, 2*time.Minute, func() time.Time { return now })
	c, err := iss.Challenge("alice", 2000)
	require.NoError(t, err)
	require.EqualValues(t, 2000, c.MaxNumber)
	sol, err := proof.Solve(c)
	require.NoError(t, err)

	p, err := iss.Verify(sol, "alice")
	require.NoError(t, err)
	require.Equal(t, c.Signature, p.ID)
	require.EqualValues(t, 2000, p.Max)
	require.InDelta(t, (2 * time.Minute).Seconds(), p.TTL.Seconds(), 1)

	_, err = iss.Verify(sol, "bob")
	require.ErrorIs(t, err, proof.ErrInvalid, "another user's")
	now = now.Add(2*time.Minute + time.Second)
	_, err = iss.Verify(sol, "alice")
	require.ErrorIs(t, err, proof.ErrInvalid, "expired")
}

func TestForgedSolutionsAreRefused(t *testing.T) {
	now := time.Now()
	iss := proof.New(key, time.Minute, func() time.Time { return now })
	c, err := iss.Challenge("alice", 500)
	require.NoError(t, err)
	sol, err := proof.Solve(c)
	require.NoError(t, err)
	var p altcha.Payload
	raw, _ := base64.StdEncoding.DecodeString(sol)
	require.NoError(t, json.Unmarshal(raw, &p))
	enc := func(p altcha.Payload) string {
		b, err := json.Marshal(p)
		require.NoError(t, err)
		return base64.StdEncoding.EncodeToString(b)
	}
	wrong := p
	wrong.Number = (p.Number + 1) % 500
	easier := p // the difficulty is inside the signed salt
	easier.Salt = replace(p.Salt, "max=500", "max=5")
	otherUser := p
	otherUser.Salt = replace(p.Salt, "user=alice", "user=bob")
	otherKey, err := proof.New([]byte("another-key-another-key-another-key!"), time.Minute, func() time.Time { return now }).Challenge("alice", 500)
	require.NoError(t, err)
	foreign, err := proof.Solve(otherKey)
	require.NoError(t, err)
	for name, header := range map[string]string{
		"wrong number": enc(wrong), "easier": enc(easier), "user changed": enc(otherUser), "another key": foreign,
		"not base64": "%%%", "not json": base64.StdEncoding.EncodeToString([]byte("{")), "empty": "",
		"too long": base64.StdEncoding.EncodeToString(make([]byte, 3000)),
	} {
		_, err := iss.Verify(header, "alice")
		require.ErrorIs(t, err, proof.ErrInvalid, name)
	}
	if _, err := iss.Verify(enc(otherUser), "bob"); err == nil {
		t.Fatal("a salt changed to another user verified")
	}
}

func replace(s, old, new string) string {
	for i := 0; i+len(old) <= len(s); i++ {
		if s[i:i+len(old)] == old {
			return s[:i] + new + s[i+len(old):]
		}
	}
	panic("no " + old + " in " + s)
}

// The gateway's CPU per check (issue 20's target: at most 20 µs).
func BenchmarkVerify(b *testing.B) {
	now := time.Now()
	iss := proof.New(key, time.Hour, func() time.Time { return now })
	c, err := iss.Challenge("alice", 1000)
	require.NoError(b, err)
	sol, err := proof.Solve(c)
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := iss.Verify(sol, "alice"); err != nil {
			b.Fatal(err)
		}
	}
}
