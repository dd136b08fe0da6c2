package gateway_test

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/access"
	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/gateway/operator"
	"github.com/flashsale/flashsale/pkg/reaper"
)

// claimWith claims voucher as user, with access code code ("" none).
func (f *fixture) claimWith(voucher, user, code string) response {
	f.t.Helper()
	if code == "" {
		return f.do("POST", "/v1/vouchers/"+voucher+"/orders", f.token(user), "")
	}
	return f.do("POST", "/v1/vouchers/"+voucher+"/orders", f.token(user), "", access.Header, code)
}

// codesFor issues the codes of users for voucher through the admin API.
func (f *fixture) codesFor(voucher string, users ...string) map[string]string {
	f.t.Helper()
	body := `{"users":["` + strings.Join(users, `","`) + `"]}`
	res := f.do("POST", "/admin/v1/vouchers/"+voucher+"/access-codes", admin, body)
	require.Equal(f.t, http.StatusOK, res.Status, res.Raw)
	out := map[string]string{}
	for i, c := range res.Body["codes"].([]any) {
		m := c.(map[string]any)
		require.Equal(f.t, users[i], m["user"], "in the users' order")
		out[m["user"].(string)] = m["code"].(string)
	}
	return out
}

// A voucher with access codes for the whole sale takes a claim only with
// its user's code for it: none is access_required, another user's or
// another voucher's is access_invalid. A voucher without codes asks for
// none, and does not look at one sent anyway, right or wrong (a wrong one
// was refused 403 access_invalid, where anyone may claim).
func TestAccessCodesAreBoundToTheirUserAndVoucher(t *testing.T) {
	f := newFixture(t)
	created := f.do("POST", "/admin/v1/vouchers", admin, `{"name":"invite-only","stock":10,"access":{}}`)
	require.Equal(t, http.StatusCreated, created.Status, created.Raw)
	require.Equal(t, map[string]any{"until": nil}, created.Body["access"], "codes for the whole sale")
	id := created.Body["id"].(string)
	open := f.createVoucher(`{"name":"open","stock":10}`)
	require.Nil(t, f.do("GET", "/admin/v1/vouchers/"+open, admin, "").Body["access"])
	codes := f.codesFor(id, "alice", "bob")
	other := f.codesFor(open, "alice")

	requireError(t, f.claimWith(id, "alice", ""), http.StatusForbidden, "access_required")
	requireError(t, f.claimWith(id, "alice", codes["bob"]), http.StatusForbidden, "access_invalid")
	requireError(t, f.claimWith(id, "alice", other["alice"]), http.StatusForbidden, "access_invalid")
	requireError(t, f.claimWith(id, "alice", "not-a-code"), http.StatusForbidden, "access_invalid")
	require.Equal(t, http.StatusAccepted, f.claimWith(id, "alice", codes["alice"]).Status)
	require.Equal(t, http.StatusAccepted, f.claimWith(id, "bob", codes["bob"]).Status)
	// A code is a capability, not a ticket: the user's limit still holds.
	requireError(t, f.claimWith(id, "bob", codes["bob"]), http.StatusConflict, "user_limit")

	require.Equal(t, http.StatusAccepted, f.claimWith(open, "carol", "").Status)
	require.Equal(t, http.StatusAccepted, f.claimWith(open, "dave", "not-a-code").Status, "no codes: none looked at")
	require.Equal(t, http.StatusAccepted, f.claimWith(open, "frank", codes["alice"]).Status, "nor another's")
	require.Equal(t, http.StatusAccepted, f.claimWith(open, "alice", other["alice"]).Status)

	// Codes put on an open sale, then taken off (PATCH access, MySQL →
	// Redis like every change).
	require.Equal(t, http.StatusOK, f.do("PATCH", "/admin/v1/vouchers/"+open, admin, `{"access":{}}`).Status)
	requireError(t, f.claimWith(open, "erin", ""), http.StatusForbidden, "access_required")
	require.Equal(t, http.StatusOK, f.do("PATCH", "/admin/v1/vouchers/"+open, admin, `{"access":null}`).Status)
	require.Equal(t, http.StatusAccepted, f.claimWith(open, "erin", "").Status)

	// Reconcile holds Redis's codes to MySQL's: agreed, then a Redis
	// that lost them is told.
	f.persist(id)
	f.persist(open)
	differences := func() []string {
		checks, err := reaper.Reconcile(t.Context(), f.env.RDB, f.env.DB, f.clock.Now(), false)
		require.NoError(t, err)
		var out []string
		for _, c := range checks {
			for _, d := range c.Differences {
				out = append(out, fmt.Sprint(d))
			}
		}
		return out
	}
	require.Empty(t, differences())
	require.NoError(t, f.env.RDB.Client().HSet(t.Context(), f.env.RDB.VoucherKey(parseID(t, id)), "access", 0).Err())
	require.Len(t, differences(), 1)
	require.Contains(t, differences()[0], "access")
}

// A presale: codes hold until the public start; a buyer with a code
// claims before it, anyone after it, and the per-user limit counts both.
func TestAPresaleThenAPublicSale(t *testing.T) {
	f := newFixture(t)
	public := f.clock.Now().Add(time.Hour).UTC()
	created := f.do("POST", "/admin/v1/vouchers", admin, `{"name":"presale","stock":10,"per_user_limit":2,"access":{"until":"`+public.Format(time.RFC3339Nano)+`"}}`)
	require.Equal(t, http.StatusCreated, created.Status, created.Raw)
	require.Equal(t, map[string]any{"until": public.Format(time.RFC3339Nano)}, created.Body["access"])
	id := created.Body["id"].(string)
	codes := f.codesFor(id, "fan")

	require.Equal(t, http.StatusAccepted, f.claimWith(id, "fan", codes["fan"]).Status)
	requireError(t, f.claimWith(id, "walk-in", ""), http.StatusForbidden, "access_required")

	f.clock.Set(public)
	require.Equal(t, http.StatusAccepted, f.claimWith(id, "walk-in", "").Status, "anyone after the public start")
	require.Equal(t, http.StatusAccepted, f.claimWith(id, "fan", "").Status, "the fan's second unit")
	requireError(t, f.claimWith(id, "fan", codes["fan"]), http.StatusConflict, "user_limit")
	require.Equal(t, http.StatusAccepted, f.claimWith(id, "late", "not-a-code").Status, "after until a code is not looked at")
	require.Equal(t, http.StatusAccepted, f.claimWith(id, "later", codes["fan"]).Status, "nor another's")
	f.persist(id)
	v, err := f.env.DB.Voucher(t.Context(), parseID(t, id))
	require.NoError(t, err)
	require.EqualValues(t, 5, v.Stock, "five units sold, across the presale and the public sale")
}

// The access codes' bad input: each a 400 (or 404) that creates nothing.
func TestBadAccessInput(t *testing.T) {
	f := newFixture(t)
	past := f.clock.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	starts := f.clock.Now().Add(2 * time.Hour).UTC()
	for _, body := range []string{
		`{"name":"x","stock":5,"access":{"until":"tomorrow"}}`,
		`{"name":"x","stock":5,"access":{"until":"` + past + `"}}`,
		`{"name":"x","stock":5,"starts_at":"` + starts.Format(time.RFC3339) + `","access":{"until":"` + starts.Add(-time.Minute).Format(time.RFC3339) + `"}}`,
		`{"name":"x","stock":5,"access":7}`,
	} {
		requireError(t, f.do("POST", "/admin/v1/vouchers", admin, body), http.StatusBadRequest, "invalid_field")
	}
	id := f.createVoucher(`{"name":"x","stock":5}`)
	for _, body := range []string{`{"access":{"untill":"x"}}`, `{"access":"yes"}`, `{"access":{"until":"` + past + `"}}`} {
		requireError(t, f.do("PATCH", "/admin/v1/vouchers/"+id, admin, body), http.StatusBadRequest, "invalid_field")
	}
	issue := func(body string) response {
		return f.do("POST", "/admin/v1/vouchers/"+id+"/access-codes", admin, body)
	}
	requireError(t, issue(`{"users":[]}`), http.StatusBadRequest, "invalid_field")
	requireError(t, issue(`{"users":["a b"]}`), http.StatusBadRequest, "invalid_field")
	requireError(t, issue(`{"users":"alice"}`), http.StatusBadRequest, "invalid_field")
	tooMany := make([]string, operator.MaxAccessUsers+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("u%d", i)
	}
	requireError(t, issue(`{"users":["`+strings.Join(tooMany, `","`)+`"]}`), http.StatusBadRequest, "invalid_field")
	requireError(t, f.do("POST", "/admin/v1/vouchers/999999/access-codes", admin, `{"users":["alice"]}`), http.StatusNotFound, "voucher_not_found")
	requireError(t, f.do("POST", "/admin/v1/vouchers/"+id+"/access-codes", f.token("alice"), `{"users":["alice"]}`), http.StatusUnauthorized, "unauthorized")
}

// 100,000 codes issued as the command line does (streamed), the same as
// the admin API's, and a sample of them claims.
func TestAHundredThousandCodes(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"drop","stock":100,"access":{}}`)
	var in bytes.Buffer
	for i := range 100_000 {
		fmt.Fprintf(&in, "fan%d\n", i)
	}
	var out bytes.Buffer
	n, err := gateway.WriteAccessCodes(&gateway.Config{AdminToken: admin}, parseID(t, id), &in, &out)
	require.NoError(t, err)
	require.Equal(t, 100_000, n)
	rows, err := csv.NewReader(&out).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 100_000)
	api := f.codesFor(id, rows[0][0], rows[99_999][0])
	require.Equal(t, rows[0][1], api[rows[0][0]], "the command line's code is the gateway's")
	require.Equal(t, rows[99_999][1], api[rows[99_999][0]])
	for i := 0; i < len(rows); i += 2_000 { // a sample of 50
		res := f.claimWith(id, rows[i][0], rows[i][1])
		require.Equal(t, http.StatusAccepted, res.Status, "%s: %s", rows[i][0], res.Raw)
	}
	requireError(t, f.claimWith(id, rows[1][0], rows[2][1]), http.StatusForbidden, "access_invalid")
}

// A waiting room in front of a voucher with codes: the join asks for the
// user's code, as the claim does.
func TestARoomJoinNeedsTheCode(t *testing.T) {
	f := newFixture(t)
	id := f.createVoucher(`{"name":"room","stock":5,"access":{},"waiting_room":{"admit_per_second":5}}`)
	codes := f.codesFor(id, "alice", "bob")
	join := func(user, code string) response {
		if code == "" {
			return f.do("POST", "/v1/vouchers/"+id+"/queue", f.token(user), "")
		}
		return f.do("POST", "/v1/vouchers/"+id+"/queue", f.token(user), "", access.Header, code)
	}
	requireError(t, join("alice", ""), http.StatusForbidden, "access_required")
	requireError(t, join("alice", codes["bob"]), http.StatusForbidden, "access_invalid")
	requireError(t, join("alice", "not-a-code"), http.StatusForbidden, "access_invalid")
	res := join("alice", codes["alice"])
	require.Equal(t, http.StatusOK, res.Status, res.Raw)
	require.NotEmpty(t, res.Body["queue_token"])
	// A room in front of a sale without codes does not look at one.
	open := f.createVoucher(`{"name":"open room","stock":5,"waiting_room":{"admit_per_second":5}}`)
	res = f.do("POST", "/v1/vouchers/"+open+"/queue", f.token("carol"), "", access.Header, codes["alice"])
	require.Equal(t, http.StatusOK, res.Status, res.Raw)
}

// The command line's codes stop at the first bad line, naming it, and
// leave only whole lines behind: those of the ids before it (a bad line
// after 3,000 good ones left 2,048 lines and a code cut in half; one over
// 64 KiB was "token too long", without its number).
func TestAccessCodesStopAtABadLineWithWholeLines(t *testing.T) {
	for name, bad := range map[string]string{
		"not an id": "fan 3000\n",
		"too long":  strings.Repeat("x", 70_000) + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			var in bytes.Buffer
			for i := range 3000 {
				fmt.Fprintf(&in, "fan%d\n", i)
			}
			in.WriteString(bad + "after\n")
			var out bytes.Buffer
			n, err := gateway.WriteAccessCodes(&gateway.Config{AdminToken: admin}, 7, &in, &out)
			require.ErrorContains(t, err, "line 3001:")
			require.Equal(t, 3000, n)
			require.True(t, strings.HasSuffix(out.String(), "\n"), "whole lines only")
			rows, err := csv.NewReader(&out).ReadAll()
			require.NoError(t, err)
			require.Len(t, rows, 3000, "the codes of the ids before the bad line")
			for i, row := range rows {
				require.Equal(t, "fan"+strconv.Itoa(i), row[0])
				require.Len(t, row[1], len(rows[0][1]), "a whole code")
			}
		})
	}
}
