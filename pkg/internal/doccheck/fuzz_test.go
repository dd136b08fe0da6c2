package doccheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// make fuzz (CI runs it) fuzzes every fuzz target of the tree, each named
// in the Makefile's FUZZ_TARGETS by its package: a target added, or moved
// to another package (FuzzCreateVoucher, with the operator's API), is
// fuzzed by CI only once the list follows, and go test -fuzz of a
// package without the target passes having fuzzed nothing.
func TestMakeFuzzNamesEveryFuzzTarget(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	m := regexp.MustCompile(`FUZZ_TARGETS := ((?:.*\\\n)*.*)\n`).FindSubmatch(mk)
	require.NotNil(t, m, "the Makefile's FUZZ_TARGETS")
	listed := strings.Fields(strings.ReplaceAll(string(m[1]), "\\", ""))
	fuzz := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(f \*testing\.F\)`)
	var found []string
	err = filepath.WalkDir(filepath.Join(root, "pkg"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		for _, f := range fuzz.FindAllSubmatch(src, -1) {
			found = append(found, "./"+filepath.ToSlash(rel)+":"+string(f[1]))
		}
		return nil
	})
	require.NoError(t, err)
	slices.Sort(listed)
	slices.Sort(found)
	require.Equal(t, found, listed, "the Makefile's FUZZ_TARGETS against the fuzz targets of pkg/")
}
