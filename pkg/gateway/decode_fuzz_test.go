package gateway

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/order"
)

func clientError(err error) bool {
	var ae *httpapi.Error
	return errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500
}

// FuzzClaimBody: any claim body is a quantity from 1 to MaxQuantity or a
// 4xx, never a panic or a 500.
func FuzzClaimBody(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"quantity":3}`, `{"quantity":0}`, `{"quantity":1.5}`, `{"quantity":"2"}`, `{"quantity":1e30}`, `[2]`, `{"quantity":`, `{"qty":1}`, `{"quantity":null}`, `{"quantity":2} {}`} {
		f.Add(s)
	}
	g := &Gateway{cfg: Config{MaxInflight: 1}} // the body reader's bound: one request, this one
	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/vouchers/1/orders", strings.NewReader(body))
		q, err := g.claimQuantity(httptest.NewRecorder(), r)
		if err != nil {
			if !clientError(err) {
				t.Fatalf("%q: %v is not a client error", body, err)
			}
			return
		}
		if q < 1 || q > order.MaxQuantity {
			t.Fatalf("%q: quantity %d", body, q)
		}
	})
}
