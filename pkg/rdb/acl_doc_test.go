package rdb_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/rdb"
)

// docs/SECURITY.md lists each role's ACL rules exactly as the code has them.
func TestSecurityDocListsTheACLRules(t *testing.T) {
	doc, err := os.ReadFile("../../docs/SECURITY.md")
	require.NoError(t, err)
	for _, role := range rdb.ACLRoles() {
		rules, err := rdb.ACLRules(role)
		require.NoError(t, err)
		line := "ACL SETUSER flashsale_" + role + " " + rules[0] + " >PASSWORD " + strings.Join(rules[1:], " ") + "\n"
		require.Contains(t, string(doc), line, "docs/SECURITY.md must list the %s rules", role)
	}
}
