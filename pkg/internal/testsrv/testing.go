package testsrv

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

var shared struct {
	once sync.Once
	db   *MariaDB
	dir  string
	err  error
}

// NewRedis starts a redis-server for one test and stops it at cleanup.
func NewRedis(tb testing.TB, extra ...string) *Redis {
	tb.Helper()
	r, err := StartRedis(tb.TempDir(), extra...)
	if err != nil {
		tb.Fatalf("start redis-server: %v", err)
	}
	tb.Cleanup(func() { _ = r.Kill() })
	return r
}

// NewDatabase returns the DSN of a fresh database on the test binary's shared
// mariadbd, started on first use. Packages that call it run their tests
// through Main so the server is stopped at the end.
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	shared.once.Do(func() {
		shared.dir, shared.err = os.MkdirTemp("", "flashsale-mariadb-")
		if shared.err == nil {
			shared.db, shared.err = StartMariaDB(shared.dir)
		}
	})
	if shared.err != nil {
		tb.Fatalf("start mariadbd: %v", shared.err)
	}
	dsn, err := shared.db.CreateDatabase(tb.Name())
	if err != nil {
		tb.Fatal(err)
	}
	return dsn
}

// NewMariaDB starts a mariadbd of the test's own, for tests that stop or
// kill the server.
func NewMariaDB(tb testing.TB) *MariaDB { return newMariaDB(tb, StartMariaDB) }

// NewMariaDBWithGrants is NewMariaDB with the grant tables in force (see
// StartMariaDBWithGrants).
func NewMariaDBWithGrants(tb testing.TB) *MariaDB { return newMariaDB(tb, StartMariaDBWithGrants) }

func newMariaDB(tb testing.TB, start func(dir string) (*MariaDB, error)) *MariaDB {
	tb.Helper()
	m, err := start(tb.TempDir())
	if err != nil {
		tb.Fatalf("start mariadbd: %v", err)
	}
	tb.Cleanup(func() { _ = m.Kill() })
	return m
}

// Main runs a package's tests and then stops the shared mariadbd.
func Main(m *testing.M) {
	code := m.Run()
	if shared.db != nil {
		if err := shared.db.Kill(); err != nil {
			fmt.Fprintln(os.Stderr, "stop mariadbd:", err)
		}
		_ = os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}
