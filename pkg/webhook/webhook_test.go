package webhook_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/webhook"
)

func TestASignatureHoldsForItsBodyAndTimeOnly(t *testing.T) {
	const secret = "webhook-secret-webhook-secret-12"
	body := []byte(`{"order_id":"1","payment_id":"p"}`)
	now := time.Now()
	v := webhook.Verifier{Secret: secret, Tolerance: 5 * time.Minute}
	for name, tc := range map[string]struct {
		header string
		want   error
	}{
		"signed now":            {webhook.Sign(body, secret, now), nil},
		"four minutes ago":      {webhook.Sign(body, secret, now.Add(-4*time.Minute)), nil},
		"six minutes ago":       {webhook.Sign(body, secret, now.Add(-6*time.Minute)), webhook.ErrStale},
		"six minutes ahead":     {webhook.Sign(body, secret, now.Add(6*time.Minute)), webhook.ErrStale},
		"another secret":        {webhook.Sign(body, "another-secret-another-secret-34", now), webhook.ErrBadSignature},
		"another body":          {webhook.Sign([]byte(`{}`), secret, now), webhook.ErrBadSignature},
		"a rollover, one right": {webhook.Sign(body, "another-secret-another-secret-34", now) + ",sha256=" + webhook.Sign(body, secret, now)[len("t=1234567890,sha256="):], nil},
		"legacy, not accepted":  {webhook.SignLegacy(body, secret), webhook.ErrBadSignature},
		"empty":                 {"", webhook.ErrBadSignature},
		"garbage":               {"t=x,sha256=zz", webhook.ErrBadSignature},
	} {
		_, err := v.Verify(tc.header, body, now)
		require.ErrorIs(t, err, tc.want, name) // ErrorIs(nil, nil) holds
		if tc.want == nil {
			require.NoError(t, err, name)
		}
	}
	v.Legacy = true
	legacy, err := v.Verify(webhook.SignLegacy(body, secret), body, now)
	require.NoError(t, err)
	require.True(t, legacy, "a legacy signature is said to be one, to be counted")
	legacy, err = v.Verify(webhook.Sign(body, secret, now), body, now)
	require.NoError(t, err)
	require.False(t, legacy)
}
