package testsrv

import (
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
)

// MariaDB is a throwaway mariadbd. It runs with --skip-grant-tables: any user
// name connects, so DSNs carry no password.
type MariaDB struct {
	// Addr is host:port of the server.
	Addr string
	srv  server
}

var dbSeq atomic.Int64

// StartMariaDB initialises a data directory in dir and starts mariadbd on it.
func StartMariaDB(dir string) (*MariaDB, error) {
	bin, err := LookPath("mariadbd")
	if err != nil {
		return nil, err
	}
	install, err := LookPath("mariadb-install-db")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	userArgs := []string{}
	if os.Geteuid() == 0 {
		userArgs = append(userArgs, "--user=root")
	}
	initArgs := append([]string{"--no-defaults", "--datadir=" + data, "--auth-root-authentication-method=normal", "--skip-test-db"}, userArgs...)
	if out, err := exec.Command(install, initArgs...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mariadb-install-db: %w\n%s", err, out)
	}
	m := &MariaDB{srv: server{name: "mariadbd", bin: bin, logPath: filepath.Join(dir, "mariadbd.log")}}
	m.srv.ready = m.ping
	err = onPort(&m.srv, func(port int) {
		m.Addr = fmt.Sprintf("127.0.0.1:%d", port)
		m.srv.args = append([]string{
			"--no-defaults", "--datadir=" + data, "--port=" + itoa(port),
			"--bind-address=127.0.0.1", "--socket=" + filepath.Join(dir, "mysqld.sock"),
			"--pid-file=" + filepath.Join(dir, "mysqld.pid"),
			"--skip-grant-tables", "--skip-name-resolve",
			"--innodb-buffer-pool-size=256M", "--innodb-log-file-size=128M",
			"--max-connections=500", "--log-error=" + filepath.Join(dir, "mariadbd.err"),
		}, userArgs...)
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (m *MariaDB) ping() error {
	db, err := sql.Open("mysql", m.DSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	return db.Ping()
}

// DSN returns a go-sql-driver DSN for database name ("" for none).
func (m *MariaDB) DSN(name string) string {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = m.Addr
	cfg.DBName = name
	cfg.Timeout = 5 * time.Second
	return cfg.FormatDSN()
}

// CreateDatabase creates a fresh, uniquely named database and returns its DSN.
func (m *MariaDB) CreateDatabase(prefix string) (string, error) {
	name := fmt.Sprintf("%s_%d_%d", sanitize(prefix), os.Getpid(), dbSeq.Add(1))
	db, err := sql.Open("mysql", m.DSN(""))
	if err != nil {
		return "", err
	}
	defer db.Close()
	if _, err := db.Exec("CREATE DATABASE `" + name + "`"); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return m.DSN(name), nil
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
		if b.Len() >= 32 {
			break
		}
	}
	return b.String()
}

// Start starts the server again after Stop or Kill, on the same port and data.
func (m *MariaDB) Start() error { return m.srv.start() }

// Stop shuts the server down cleanly.
func (m *MariaDB) Stop() error { return m.srv.stop() }

// Kill kills the server with SIGKILL; InnoDB recovers committed work on Start.
func (m *MariaDB) Kill() error { return m.srv.kill() }
