package testclock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/testclock"
)

// marker is what a comment says, on a fixed date's own line, to keep the
// date: "fixed date: <why nothing stored depends on it>".
const marker = "fixed date:"

// A calendar date in a string: an RFC 3339 day or an order's day key.
var dateLiteral = regexp.MustCompile("^[\"`].*\\b20\\d\\d-[01]\\d-[0-3]\\d|^\"20\\d\\d[01]\\d[0-3]\\d\"$")

// TestNoCalendarDatesInTests fails when a test, or a test helper under
// pkg/internal, names a calendar date (time.Date with a literal year, an
// RFC 3339 date or a day key in a string) without a "fixed date:" comment
// saying why nothing it stores depends on it. Times written to a store
// come from testclock (or a clock the test owns and starts from it).
func TestNoCalendarDatesInTests(t *testing.T) {
	root := moduleRoot(t)
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bin" {
				return filepath.SkipDir
			}
			return nil
		}
		helper := strings.HasPrefix(rel, filepath.Join("pkg", "internal")+string(filepath.Separator))
		if !strings.HasSuffix(path, ".go") || !(strings.HasSuffix(path, "_test.go") || helper) {
			return nil
		}
		found = append(found, calendarDates(t, path, rel)...)
		return nil
	})
	require.NoError(t, err)
	require.Empty(t, found, "calendar dates in tests: take the time from testclock, or say %q why the date stores nothing", marker)
}

// calendarDates lists the unexplained calendar dates of one file.
func calendarDates(t *testing.T, path, rel string) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
	require.NoError(t, err, path)
	explained := map[int]bool{}
	for _, g := range f.Comments {
		for _, c := range g.List {
			if strings.Contains(c.Text, marker) {
				explained[fset.Position(c.Pos()).Line] = true
			}
		}
	}
	var out []string
	flag := func(n ast.Node, what string) {
		line := fset.Position(n.Pos()).Line
		if !explained[line] {
			out = append(out, rel+":"+strconv.Itoa(line)+": "+what)
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Date" && len(n.Args) > 0 {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "time" {
					if lit, ok := n.Args[0].(*ast.BasicLit); ok && lit.Kind == token.INT {
						flag(n, "time.Date with the year "+lit.Value)
					}
				}
			}
		case *ast.BasicLit:
			// Go's reference time (2006-01-02) in a string is a layout, not a date.
			if n.Kind == token.STRING && dateLiteral.MatchString(n.Value) && !strings.Contains(n.Value, "2006-01-02") {
				flag(n, "date in "+n.Value)
			}
		}
		return true
	})
	return out
}

func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "no go.mod above the test")
		dir = parent
	}
}

// The guard finds what it is for, and lets an explained date stay.
func TestTheGuardFindsCalendarDates(t *testing.T) {
	dir := t.TempDir()
	// The guard's own fixture, written to a file and parsed; YEAR and DAY
	// are filled in so that no date stands in this file.
	src := strings.NewReplacer("~", "`", "YEAR", "2026", "DAY", "2026"+"1121").Replace(`package x

import "time"

var a = time.Date(YEAR, 11, 21, 10, 0, 0, 0, time.UTC)
var b = "DAY"
var c = ~{"ends_at":"YEAR-01-01T00:00:00Z"}~
// a comment above does not explain the line below
var d = time.Date(YEAR, 1, 2, 0, 0, 0, 0, time.UTC)
var e = time.Date(now.Year(), 1, 2, 0, 0, 0, 0, time.UTC)
var f = at.Format("2006-01-02 15:04")
var g = time.Date(YEAR, 1, 2, 0, 0, 0, 0, time.UTC) // fixed date: parsing only
`)
	path := filepath.Join(dir, "x_test.go")
	require.NoError(t, os.WriteFile(path, []byte(src), 0o600))
	require.Equal(t, []string{
		"x_test.go:5: time.Date with the year " + "2026",
		`x_test.go:6: date in "` + "2026" + `1121"`,
		"x_test.go:7: date in `{\"ends_at\":\"" + "2026" + "-01-01T00:00:00Z\"}`",
		"x_test.go:9: time.Date with the year " + "2026",
	}, calendarDates(t, path, "x_test.go"))
}

func TestStartIsTheClocks(t *testing.T) {
	before := time.Now()
	s := testclock.Start()
	require.False(t, s.After(before))
	require.Less(t, before.Sub(s), time.Hour+time.Second)
	require.Equal(t, s.Day(), s.Add(59*time.Minute).Day(), "minutes added stay in one UTC day")

	shanghai := time.FixedZone("CST", 8*3600)
	m := testclock.BeforeMidnight(shanghai, time.Second)
	next := m.Add(time.Second).In(shanghai)
	require.Equal(t, 0, next.Hour()+next.Minute()+next.Second())
	require.True(t, m.Before(before))
	require.Less(t, before.Sub(m), 24*time.Hour+2*time.Second)
}
