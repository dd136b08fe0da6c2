package gateway_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/rdb"
)

// On a hot voucher (four buckets) with the workers stopped,
// users whose claims are decided in different buckets each see all of
// their pending orders, and the admin backlog counts every bucket's
// stream. (The store's half runs on a Redis Cluster too:
// TestUserPendingFindsOrdersInEveryBucket in pkg/rdb.)
func TestPendingOrdersOfAHotVoucherAreAllListed(t *testing.T) {
	f := newFixture(t) // four partitions: one bucket in each
	id := f.createVoucher(`{"name":"hot","stock":100,"per_user_limit":3,"stock_buckets":4}`)
	mine := map[string][]string{}
	for b := range 4 {
		for i := 0; len(mine) < b+1; i++ {
			u := fmt.Sprintf("buyer-%d", i)
			if _, taken := mine[u]; taken || rdb.UserBucket(u, 4) != b {
				continue
			}
			for range 3 {
				res := f.do("POST", "/v1/vouchers/"+id+"/orders", f.token(u), "")
				require.Equal(t, http.StatusAccepted, res.Status, res.Raw)
				mine[u] = append(mine[u], res.Body["order_id"].(string))
			}
		}
	}
	for u, want := range mine {
		list := f.do("GET", "/v1/orders?voucher_id="+id, f.token(u), "")
		require.Equal(t, http.StatusOK, list.Status, list.Raw)
		var got []string
		for _, o := range list.Body["orders"].([]any) {
			require.Equal(t, "pending", o.(map[string]any)["status"])
			got = append(got, o.(map[string]any)["order_id"].(string))
		}
		require.ElementsMatch(t, want, got, "user %s (bucket %d)", u, rdb.UserBucket(u, 4))
	}
	v := f.do("GET", "/admin/v1/vouchers/"+id, admin, "")
	require.Equal(t, http.StatusOK, v.Status, v.Raw)
	require.EqualValues(t, 12, v.Body["stream"].(map[string]any)["length"], "every bucket's stream counted: %s", v.Raw)
	require.Len(t, v.Body["streams"], 4)
	for _, s := range v.Body["streams"].([]any) {
		require.EqualValues(t, 3, s.(map[string]any)["length"])
	}
}
