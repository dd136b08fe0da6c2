package db_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/testsrv"
	schema "github.com/flashsale/flashsale/sql"
)

// Two migrators at once (two pods starting) apply each migration once, a
// second run applies nothing, and the schema refuses negative stock.
func TestApplyTwiceAndConcurrently(t *testing.T) {
	db, err := sql.Open("mysql", testsrv.NewDatabase(t))
	require.NoError(t, err)
	defer db.Close()
	ctx := context.Background()

	// Two migrators at once (two pods): each migration is applied once.
	var wg sync.WaitGroup
	results := make([][]string, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = schema.Apply(ctx, db)
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	migs, err := schema.Migrations()
	require.NoError(t, err)
	require.Equal(t, len(migs), len(results[0])+len(results[1]), "each migration applied exactly once")

	again, err := schema.Apply(ctx, db)
	require.NoError(t, err)
	require.Empty(t, again)

	for _, table := range []string{"vouchers", "orders"} {
		var n int
		require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM "+table).Scan(&n))
	}
	// The schema refuses negative stock outright.
	_, err = db.Exec("INSERT INTO vouchers (name, stock, stock_total, per_user_limit, payment_timeout_seconds, created_at) VALUES ('x', -1, 5, 1, 60, NOW())")
	require.Error(t, err)
}
