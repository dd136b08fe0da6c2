// Package smoke checks a running deployment end to end the way a user
// would: it creates a one-unit voucher, claims it, waits until a worker has
// persisted the order, and checks that the next claim is sold out. Then it
// cleans up: the order is cancelled (its unit released) and the voucher
// paused, so a production database keeps nothing sellable from a check.
// The chart's "helm test" runs it as "gateway smoke".
package smoke

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/flashsale/flashsale/pkg/token"
)

// Config of a smoke test.
type Config struct {
	// URL is the gateway's base URL, AdminURL its admin API's (default URL).
	URL, AdminURL string
	// Timeout bounds the whole check, waiting for the worker included.
	Timeout time.Duration
	// Issuer and Audience go into the test users' tokens when the gateway
	// requires them.
	Issuer, Audience string
}

// Run performs the check and writes what it did to out.
func Run(ctx context.Context, cfg Config, adminToken, jwtSecret string, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	c := &client{base: cfg.URL, http: &http.Client{Timeout: 10 * time.Second}}
	adm := &client{base: cmp.Or(cfg.AdminURL, cfg.URL), http: c.http}
	var v struct {
		ID string `json:"id"`
	}
	// It ends soon after the check could: even a voucher a failed check
	// leaves behind sells nothing for long.
	ends := time.Now().Add(cfg.Timeout + time.Minute).UTC().Format(time.RFC3339)
	if err := adm.do(ctx, "POST", "/admin/v1/vouchers", adminToken, map[string]any{
		"name": "smoke test (paused after the check)", "stock": 1, "per_user_limit": 1, "payment_timeout_seconds": 60, "ends_at": ends,
	}, http.StatusCreated, &v); err != nil {
		if cfg.AdminURL == "" && strings.Contains(err.Error(), "404") {
			return fmt.Errorf("create voucher: %w (a gateway whose admin API has a listener of its own, FLASHSALE_ADMIN_ADDR, answers it there: set FLASHSALE_SMOKE_ADMIN_URL to it)", err)
		}
		return fmt.Errorf("create voucher: %w", err)
	}
	fmt.Fprintf(out, "created voucher %s with 1 unit, ending %s\n", v.ID, ends)

	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	first, err := token.SignUserFor(jwtSecret, "smoke-a-"+suffix, cfg.Issuer, cfg.Audience, time.Now().Add(10*time.Minute))
	if err != nil {
		return err
	}
	second, err := token.SignUserFor(jwtSecret, "smoke-b-"+suffix, cfg.Issuer, cfg.Audience, time.Now().Add(10*time.Minute))
	if err != nil {
		return err
	}
	var claim struct {
		OrderID string `json:"order_id"`
	}
	if err := c.do(ctx, "POST", "/v1/vouchers/"+v.ID+"/orders", first, nil, http.StatusAccepted, &claim); err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	fmt.Fprintf(out, "claimed: order %s pending\n", claim.OrderID)
	var rejected struct {
		Error string `json:"error"`
	}
	if err := c.do(ctx, "POST", "/v1/vouchers/"+v.ID+"/orders", second, nil, http.StatusConflict, &rejected); err != nil || rejected.Error != "sold_out" {
		return fmt.Errorf("second claim should be sold_out: %v %q", err, rejected.Error)
	}
	fmt.Fprintln(out, "second claim: sold_out")
	for {
		var o struct {
			Status string `json:"status"`
		}
		if err := c.do(ctx, "GET", "/v1/orders/"+claim.OrderID, first, nil, http.StatusOK, &o); err != nil {
			return fmt.Errorf("read order: %w", err)
		}
		if o.Status == "created" {
			fmt.Fprintln(out, "order persisted by a worker: created")
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("order still %q: is a worker running? %w", o.Status, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	// Clean up: the unit back, the voucher paused.
	if err := c.do(ctx, "POST", "/v1/orders/"+claim.OrderID+"/cancel", first, nil, http.StatusOK, nil); err != nil {
		return fmt.Errorf("cancel the test order: %w", err)
	}
	if err := adm.do(ctx, "POST", "/admin/v1/vouchers/"+v.ID+"/pause", adminToken, nil, http.StatusOK, nil); err != nil {
		return fmt.Errorf("pause the test voucher: %w", err)
	}
	fmt.Fprintf(out, "cleaned up: order %s cancelled, voucher %s paused\n", claim.OrderID, v.ID)
	return nil
}

type client struct {
	base string
	http *http.Client
}

func (c *client) do(ctx context.Context, method, path, token string, body any, want int, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return err
	}
	if res.StatusCode != want {
		return fmt.Errorf("%s %s: status %d, want %d: %s", method, path, res.StatusCode, want, b)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}
