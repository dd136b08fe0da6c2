package db_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/db"
)

// docs/SECURITY.md lists each role's grants exactly as the code has them.
func TestSecurityDocListsTheGrants(t *testing.T) {
	doc, err := os.ReadFile("../../docs/SECURITY.md")
	require.NoError(t, err)
	for _, role := range db.GrantRoles() {
		stmts, err := db.Grants(role, "flashsale", "'flashsale_"+role+"'@'%'")
		require.NoError(t, err)
		for _, s := range stmts {
			require.Contains(t, string(doc), s+";\n", "docs/SECURITY.md must list the %s grants", role)
		}
	}
	_, err = db.Grants("nobody", "flashsale", "x")
	require.Error(t, err)
}
