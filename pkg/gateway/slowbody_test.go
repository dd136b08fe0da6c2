package gateway_test

import (
	"bufio"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/internal/testenv"
	"github.com/flashsale/flashsale/pkg/payment"
)

// slowBody opens a request that announces a body of length bytes, sends
// one byte of it and holds the rest: it returns once the handler is
// reading the body (the server's 100 Continue says so) or has answered.
func slowBody(t *testing.T, f *fixture, path, token string, length int) *bufio.Reader {
	t.Helper()
	c, err := net.Dial("tcp", f.srv.Listener.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
	head := "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n" +
		"Content-Length: " + strconv.Itoa(length) + "\r\n"
	if token != "" {
		head += "Authorization: Bearer " + token + "\r\n"
	}
	_, err = c.Write([]byte(head + "\r\n"))
	require.NoError(t, err)
	rd := bufio.NewReader(c)
	status, err := rd.ReadString('\n')
	require.NoError(t, err)
	if strings.Contains(status, " 100 ") {
		_, err = rd.ReadString('\n') // the blank line after 100 Continue
		require.NoError(t, err)
		_, err = c.Write([]byte("{"))
		require.NoError(t, err)
		return rd
	}
	t.Logf("answered before reading the body: %s", status)
	return nil
}

// requireTimesOut reads the answer to a slow body: 408 body_timeout once
// the body's deadline passes, well within the listener's 10 s.
func requireTimesOut(t *testing.T, rd *bufio.Reader) {
	t.Helper()
	require.NotNil(t, rd, "the request was answered before its body was read")
	status, err := rd.ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, status, " 408 ")
	rest, _ := rd.ReadString('}')
	require.Contains(t, rest, `"error":"body_timeout"`)
}

// Webhooks whose bodies never finish held every MySQL
// slot (the body was read inside one, before the signature was checked),
// so orders, payments and the admin API answered 503 for as long as they
// held. The webhook now reads and verifies before it takes a slot.
func TestSlowWebhookBodiesHoldNoMySQLSlot(t *testing.T) {
	const slots = 4
	f := newFixtureOn(t, testenv.New(t, 1), gateway.Config{PaymentWebhookSecret: webhookSecret, MySQLMaxInflight: slots})
	id := f.createVoucher(`{"name":"w","stock":3}`)
	var slow []*bufio.Reader
	for range slots {
		slow = append(slow, slowBody(t, f, "/v1/payments/webhook", "", 100_000))
	}
	res := f.do("GET", "/v1/orders?voucher_id="+id, f.token("a"), "")
	require.Equal(t, http.StatusOK, res.Status, res.Raw)
	require.Equal(t, http.StatusOK, f.do("GET", "/admin/v1/vouchers", admin, "").Status)
	body := `{"order_id":"999999","payment_id":"p1"}`
	requireError(t, f.do("POST", "/v1/payments/webhook", "", body, payment.Header, payment.Sign([]byte(body), webhookSecret, time.Now())),
		http.StatusNotFound, "order_not_found")
	requireTimesOut(t, slow[0])
}

// Claims whose bodies never finish held in-flight
// tokens until the listener's read timeout, so honest claims were answered
// 503 overloaded. Waiting for a body no longer counts as work, and the
// body has a deadline of its own.
func TestSlowClaimBodiesDoNotFillTheInflightBound(t *testing.T) {
	const inflight = 4
	f := newFixtureOn(t, testenv.New(t, 1), gateway.Config{MaxInflight: inflight})
	id := f.createVoucher(`{"name":"c","stock":10,"per_user_limit":2}`)
	path := "/v1/vouchers/" + id + "/orders"
	var slow []*bufio.Reader
	for i := range inflight {
		slow = append(slow, slowBody(t, f, path, f.token("slow"+strconv.Itoa(i)), 20))
	}
	res := f.do("POST", path, f.token("honest"), "")
	require.Equal(t, http.StatusAccepted, res.Status, res.Raw)
	res = f.do("POST", path, f.token("honest2"), `{"quantity":2}`)
	require.Equal(t, http.StatusAccepted, res.Status, res.Raw)
	requireTimesOut(t, slow[0])
	// A slow claim took nothing.
	status := f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
	require.EqualValues(t, 7, status.Body["remaining_redis"], status.Raw)
}
