package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docs/TESTING.md names tests that exist: a renamed or removed test
// takes its line with it.
func TestTheTestingPageNamesRealTests(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "TESTING.md"))
	require.NoError(t, err)
	defined := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	require.NoError(t, filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		for _, m := range decl.FindAllSubmatch(src, -1) {
			defined[string(m[1])] = true
		}
		return err
	}))
	named := regexp.MustCompile("`\\^?(Test[A-Za-z0-9]+)\\$?`").FindAllSubmatch(doc, -1)
	require.GreaterOrEqual(t, len(named), 10)
	for _, m := range named {
		require.True(t, defined[string(m[1])], "docs/TESTING.md names %s, which no test file defines", m[1])
	}
}

// The packages docs/TESTING.md says run on a Redis Cluster too are the
// ones the Makefile's test target runs with -redis-cluster, and each of
// them runs its tests through testsrv.MainMaybeOnCluster (without it the
// flag would change nothing).
func TestTheTestingPageNamesTheClusterRuns(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	line := regexp.MustCompile(`(?m)^\t\$\(GO\) test .*?((?: \./pkg/\S+)+) -args -redis-cluster$`).FindSubmatch(mk)
	require.NotNil(t, line, "the Makefile runs packages with -redis-cluster")
	var made []string
	for _, p := range strings.Fields(string(line[1])) {
		made = append(made, strings.TrimPrefix(p, "./"))
	}
	doc := read(t, "TESTING.md")
	_, sentence, ok := strings.Cut(doc, "The\npackages that send Redis commands themselves (")
	require.True(t, ok, "docs/TESTING.md says which packages run on a cluster")
	sentence, _, _ = strings.Cut(sentence, ")")
	var said []string
	for _, m := range regexp.MustCompile("`(pkg/[^`]+)`").FindAllStringSubmatch(sentence, -1) {
		said = append(said, m[1])
	}
	require.Equal(t, made, said, "docs/TESTING.md against the Makefile's -redis-cluster run")
	for _, p := range made {
		files, err := filepath.Glob(filepath.Join(root, p, "*_test.go"))
		require.NoError(t, err)
		found := false
		for _, f := range files {
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			found = found || strings.Contains(string(src), "testsrv.MainMaybeOnCluster(")
		}
		require.True(t, found, "%s runs with -redis-cluster but its tests never start a cluster", p)
	}
}
