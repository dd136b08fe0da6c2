package payment_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/payment"
)

func TestASignatureHoldsForItsBodyAndTimeOnly(t *testing.T) {
	const secret = "webhook-secret-webhook-secret-12"
	body := []byte(`{"order_id":"1","payment_id":"p"}`)
	now := time.Now()
	v := payment.Verifier{Secret: secret, Tolerance: 5 * time.Minute}
	for name, tc := range map[string]struct {
		header string
		want   error
	}{
		"signed now":            {payment.Sign(body, secret, now), nil},
		"four minutes ago":      {payment.Sign(body, secret, now.Add(-4*time.Minute)), nil},
		"six minutes ago":       {payment.Sign(body, secret, now.Add(-6*time.Minute)), payment.ErrStale},
		"six minutes ahead":     {payment.Sign(body, secret, now.Add(6*time.Minute)), payment.ErrStale},
		"another secret":        {payment.Sign(body, "another-secret-another-secret-34", now), payment.ErrBadSignature},
		"another body":          {payment.Sign([]byte(`{}`), secret, now), payment.ErrBadSignature},
		"a rollover, one right": {payment.Sign(body, "another-secret-another-secret-34", now) + ",sha256=" + payment.Sign(body, secret, now)[len("t=1234567890,sha256="):], nil},
		"legacy, not accepted":  {payment.SignLegacy(body, secret), payment.ErrBadSignature},
		"empty":                 {"", payment.ErrBadSignature},
		"garbage":               {"t=x,sha256=zz", payment.ErrBadSignature},
	} {
		_, err := v.Verify(tc.header, body, now)
		require.ErrorIs(t, err, tc.want, name) // ErrorIs(nil, nil) holds
		if tc.want == nil {
			require.NoError(t, err, name)
		}
	}
	v.Legacy = true
	legacy, err := v.Verify(payment.SignLegacy(body, secret), body, now)
	require.NoError(t, err)
	require.True(t, legacy, "a legacy signature is said to be one, to be counted")
	legacy, err = v.Verify(payment.Sign(body, secret, now), body, now)
	require.NoError(t, err)
	require.False(t, legacy)
}
