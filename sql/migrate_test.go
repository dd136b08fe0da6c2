package schema

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Applying the migrations to a real server is tested in pkg/db
// (migrate_test.go), where the test servers are.

func TestStatements(t *testing.T) {
	got := Statements("-- c\nCREATE TABLE a (\n  x INT -- inline\n);\n\n-- d\nCREATE TABLE b (y INT);\n")
	require.Len(t, got, 2)
	require.Contains(t, got[0], "CREATE TABLE a")
	require.Equal(t, "CREATE TABLE b (y INT)", got[1])
}
