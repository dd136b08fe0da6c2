package proof_test

import (
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
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
	c, err := iss.Challenge("alice", 7, 2000)
	require.NoError(t, err)
	require.EqualValues(t, 2000, c.MaxNumber)
	sol, err := proof.Solve(c)
	require.NoError(t, err)

	p, err := iss.Verify(sol, "alice", 7)
	require.NoError(t, err)
	require.Equal(t, c.Signature, p.ID)
	require.EqualValues(t, 2000, p.Max)
	require.GreaterOrEqual(t, p.TTL, 2*time.Minute+proof.UsedKeySlack, "the used-key outlives the challenge")

	_, err = iss.Verify(sol, "bob", 7)
	require.ErrorIs(t, err, proof.ErrInvalid, "another user's")
	_, err = iss.Verify(sol, "alice", 8)
	require.ErrorIs(t, err, proof.ErrInvalid, "another voucher's")
	now = now.Add(2*time.Minute + time.Second)
	_, err = iss.Verify(sol, "alice", 7)
	require.ErrorIs(t, err, proof.ErrInvalid, "expired")
}

// A proof used just before its challenge expires is still remembered as
// used by the time the challenge has expired on any clock near the
// gateway's: its used-key's TTL is the time left rounded up, plus slack.
// (Rounded down, a use 0.45 s before expiry got a TTL of 0 s, made 1 s, and
// a use two minutes earlier had long expired: the proof was spent twice.)
func TestAProofUsedNearItsExpiryIsRememberedBeyondIt(t *testing.T) {
	now := time.Now()
	iss := proof.New(key, 2*time.Minute, func() time.Time { return now })
	c, err := iss.Challenge("alice", 7, 100)
	require.NoError(t, err)
	sol, err := proof.Solve(c)
	require.NoError(t, err)
	var exp int64
	for _, kv := range splitParams(c.Salt) {
		if k, v, _ := strings.Cut(kv, "="); k == "expires" {
			exp = atoi(t, v)
		}
	}
	require.NotZero(t, exp)
	now = time.Unix(exp, 0).Add(-450 * time.Millisecond)
	p, err := iss.Verify(sol, "alice", 7)
	require.NoError(t, err)
	require.True(t, now.Add(p.TTL).After(time.Unix(exp, 0).Add(proof.UsedKeySlack-time.Millisecond)),
		"used-key expires at %s, the challenge at %s", now.Add(p.TTL), time.Unix(exp, 0))
}

func TestForgedSolutionsAreRefused(t *testing.T) {
	now := time.Now()
	iss := proof.New(key, time.Minute, func() time.Time { return now })
	c, err := iss.Challenge("alice", 7, 500)
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
	otherVoucher := p
	otherVoucher.Salt = replace(p.Salt, "v=7", "v=8")
	otherKey, err := proof.New([]byte("another-key-another-key-another-key!"), time.Minute, func() time.Time { return now }).Challenge("alice", 7, 500)
	require.NoError(t, err)
	foreign, err := proof.Solve(otherKey)
	require.NoError(t, err)
	for name, header := range map[string]string{
		"wrong number": enc(wrong), "easier": enc(easier), "user changed": enc(otherUser), "voucher changed": enc(otherVoucher),
		"another key": foreign,
		"not base64":  "%%%", "not json": base64.StdEncoding.EncodeToString([]byte("{")), "empty": "",
		"too long": base64.StdEncoding.EncodeToString(make([]byte, 3000)),
	} {
		_, err := iss.Verify(header, "alice", 7)
		require.ErrorIs(t, err, proof.ErrInvalid, name)
	}
	if _, err := iss.Verify(enc(otherUser), "bob", 7); err == nil {
		t.Fatal("a salt changed to another user verified")
	}
	if _, err := iss.Verify(enc(otherVoucher), "alice", 8); err == nil {
		t.Fatal("a salt changed to another voucher verified")
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

// The gateway's CPU per check (the target: at most 20 µs).
func BenchmarkVerify(b *testing.B) {
	now := time.Now()
	iss := proof.New(key, time.Hour, func() time.Time { return now })
	c, err := iss.Challenge("alice", 7, 1000)
	require.NoError(b, err)
	sol, err := proof.Solve(c)
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := iss.Verify(sol, "alice", 7); err != nil {
			b.Fatal(err)
		}
	}
}

func splitParams(salt string) []string {
	_, q, _ := strings.Cut(salt, "?")
	var out []string
	for q != "" {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		out = append(out, kv)
	}
	return out
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err)
	return n
}
