package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A PATCH is all or nothing: every mix of good fields with one bad one
// (or with two that do not go together: a room and a split) is answered
// 400 and writes nothing, in MySQL or Redis.
func TestARefusedPatchWritesNothing(t *testing.T) {
	f := newFixture(t)
	later := f.clock.Now().Add(48 * time.Hour).UTC().Format(time.RFC3339)
	good := map[string]string{
		"add_stock":     `5`,
		"ends_at":       `"` + later + `"`,
		"proof_of_work": `{"max_number":1000}`,
		"access":        `{}`,
		"waiting_room":  `{"admit_per_second":10}`,
		"stock_buckets": `2`,
	}
	bad := map[string]string{
		"add_stock":     `-5`,
		"ends_at":       `"yesterday"`,
		"proof_of_work": `{"max_number":-1}`,
		"access":        `{"until":"soon"}`,
		"waiting_room":  `{"admit_per_second":0}`,
		"stock_buckets": `65`,
	}
	names := []string{"add_stock", "ends_at", "proof_of_work", "access", "waiting_room", "stock_buckets"}
	for w, wrong := range names {
		for mask := 0; mask < 1<<len(names); mask++ {
			if mask&(1<<w) != 0 {
				continue // the bad field's own bit: the same mixes again
			}
			var fields []string
			for i, n := range names {
				if mask&(1<<i) != 0 {
					fields = append(fields, `"`+n+`":`+good[n])
				}
			}
			fields = append(fields, `"`+wrong+`":`+bad[wrong])
			requirePatchRefused(t, f, "{"+strings.Join(fields, ",")+"}")
		}
	}
	// Good fields that do not go together: a room and a split.
	requirePatchRefused(t, f, `{"add_stock":5,"stock_buckets":2,"waiting_room":{"admit_per_second":10}}`)
}

// requirePatchRefused PATCHes a fresh voucher with body and requires a 400
// that changed nothing the voucher shows.
func requirePatchRefused(t *testing.T, f *fixture, body string) {
	t.Helper()
	id := f.createVoucher(`{"name":"patched","stock":40,"per_user_limit":5}`)
	before := f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
	res := f.do("PATCH", "/admin/v1/vouchers/"+id, admin, body)
	require.Equal(t, http.StatusBadRequest, res.Status, "%s: %s", body, res.Raw)
	after := f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
	delete(before.Body, "stats")
	delete(after.Body, "stats")
	require.Equal(t, before.Body, after.Body, "%s was refused and changed the voucher", body)
	// Redis too: its stock is the stock it had.
	require.Equal(t, http.StatusAccepted, f.do("POST", "/v1/vouchers/"+id+"/orders", f.token("probe"), `{"quantity":5}`).Status)
	left, _, err := f.env.RDB.RemainingStock(t.Context(), parseID(t, id))
	require.NoError(t, err)
	require.Equal(t, int64(35), left, "%s was refused and changed Redis", body)
}

// A waiting room and a split are refused together, whichever comes
// first, also when two PATCHes race: one decision under the voucher's
// row lock. Sequential first, then 20 races.
func TestARoomAndASplitNeverGoTogether(t *testing.T) {
	f := newFixture(t)
	split := f.createVoucher(`{"name":"split first","stock":40}`)
	require.Equal(t, http.StatusOK, f.do("PATCH", "/admin/v1/vouchers/"+split, admin, `{"stock_buckets":4}`).Status)
	requireError(t, f.do("PATCH", "/admin/v1/vouchers/"+split, admin, `{"waiting_room":{"admit_per_second":10}}`), http.StatusBadRequest, "invalid_field")
	room := f.createVoucher(`{"name":"room first","stock":40,"waiting_room":{"admit_per_second":10}}`)
	requireError(t, f.do("PATCH", "/admin/v1/vouchers/"+room, admin, `{"stock_buckets":4}`), http.StatusBadRequest, "invalid_field")

	for range 20 {
		id := f.createVoucher(`{"name":"race","stock":40}`)
		var wg sync.WaitGroup
		statuses := make([]int, 2)
		for i, body := range []string{`{"stock_buckets":4}`, `{"add_stock":1,"waiting_room":{"admit_per_second":10}}`} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, err := http.NewRequest("PATCH", f.srv.URL+"/admin/v1/vouchers/"+id, strings.NewReader(body))
				if err == nil {
					req.Header.Set("Authorization", "Bearer "+admin)
					if res, err := http.DefaultClient.Do(req); err == nil {
						statuses[i] = res.StatusCode
						res.Body.Close()
					}
				}
			}()
		}
		wg.Wait()
		got := f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
		var v struct {
			StockBuckets int             `json:"stock_buckets"`
			SplitTo      int             `json:"split_to"`
			Room         json.RawMessage `json:"waiting_room"`
		}
		require.NoError(t, json.Unmarshal([]byte(got.Raw), &v))
		roomOn := len(v.Room) > 0 && string(v.Room) != "null"
		splitAsked := v.StockBuckets > 1 || v.SplitTo > 1
		require.False(t, roomOn && splitAsked, "both a room and a split: %s (answers %v)", got.Raw, statuses)
		require.ElementsMatch(t, []int{http.StatusOK, http.StatusBadRequest}, statuses, "one of the two is refused: %s", got.Raw)
	}
}
