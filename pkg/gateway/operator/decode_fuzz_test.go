package operator

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/flashsale/flashsale/pkg/gateway/httpapi"
	"github.com/flashsale/flashsale/pkg/voucher"
)

func clientError(err error) bool {
	var ae *httpapi.Error
	return errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500
}

// FuzzCreateVoucher: any creation body is a voucher its kind can sell (an
// envelope's amounts summing to its total, each at least the floor; one
// item per unit of a pool) or a 4xx; never a panic or a 500.
func FuzzCreateVoucher(f *testing.F) {
	for _, s := range []string{
		`{"name":"a","stock":5}`,
		`{"name":"a","kind":"envelope","total_amount":100,"count":7,"min_amount":3}`,
		`{"name":"a","kind":"envelope","total_amount":10,"count":5,"min_amount":3}`,
		`{"name":"a","kind":"codes","codes":["A","B","A"]}`,
		`{"name":"a","kind":"codes","codes":["A-1","B_2"],"per_user_limit":2}`,
		`{"name":"a","kind":"lottery"}`,
		`{"name":"a","stock":5,"ends_at":"2020-01-01T00:00:00Z"}`, // fixed date: decoded and validated, never stored.
		`{"name":"a","stock":5,"starts_at":"2126-01-02T00:00:00Z","ends_at":"2126-01-01T00:00:00Z"}`,
		`{"name":"","stock":1e9}`, `[]`, `{"name":"a","kind":"envelope","total_amount":1000000000000,"count":1}`,
	} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC) // fixed date: the validation's now; the fuzz stores nothing.
	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest(http.MethodPost, "/admin/v1/vouchers", strings.NewReader(body))
		var req voucher.Request
		err := httpapi.DecodeJSON(httptest.NewRecorder(), r, &req, maxCreateBytes)
		if err == nil {
			vo, items, verr := req.Create(now, rand.New(rand.NewPCG(1, 2)))
			err = ruleError(verr)
			if err == nil {
				if vo.Stock < 1 || vo.StockTotal != vo.Stock || vo.PerUserLimit < 1 {
					t.Fatalf("%q: voucher %+v", body, vo)
				}
				if vo.Traits().Pooled != (len(items) > 0) || (len(items) > 0 && int64(len(items)) != vo.Stock) {
					t.Fatalf("%q: %d items for stock %d of kind %s", body, len(items), vo.Stock, vo.Kind)
				}
				var sum int64
				for _, it := range items {
					if it.Amount < vo.MinAmount {
						t.Fatalf("%q: envelope %+v below the floor %d", body, it, vo.MinAmount)
					}
					sum += it.Amount
				}
				if sum != vo.TotalAmount {
					t.Fatalf("%q: envelopes sum to %d, total %d", body, sum, vo.TotalAmount)
				}
			}
		}
		if err != nil && !clientError(err) {
			t.Fatalf("%q: %v is not a client error", body, err)
		}
	})
}
