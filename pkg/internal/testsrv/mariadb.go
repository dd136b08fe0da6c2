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

// MariaDB is a throwaway mariadbd. Unless started WithGrants it runs with
// --skip-grant-tables: any user name connects, so DSNs carry no password.
type MariaDB struct {
	// Addr is host:port of the server.
	Addr   string
	socket string
	srv    server
}

var dbSeq atomic.Int64

// StartMariaDB initialises a data directory in dir and starts mariadbd on it.
func StartMariaDB(dir string) (*MariaDB, error) { return startMariaDB(nil, dir, false) }

// StartMariaDBIn is StartMariaDB inside network namespace n, listening on
// n's address (its socket, on the shared file system, still answers the
// readiness check).
func StartMariaDBIn(n *Netns, dir string) (*MariaDB, error) { return startMariaDB(n, dir, false) }

// StartMariaDBWithGrants is StartMariaDB with the grant tables in force:
// root (no password) may do anything, and RestrictedUser makes users that
// may not, so read_only and missing privileges behave as in production.
func StartMariaDBWithGrants(dir string) (*MariaDB, error) { return startMariaDB(nil, dir, true) }

func startMariaDB(n *Netns, dir string, grants bool) (*MariaDB, error) {
	bin, err := LookPath("mariadbd")
	if err != nil {
		return nil, err
	}
	install, err := LookPath("mariadb-install-db")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	// A tmpdir of its own: with /tmp shared, one server's start-up removes
	// another's "#sql" temporary files (seen as mariadb-install-db failing
	// "Error on delete of /tmp/#sql-temptable-…" while tests ran in parallel).
	tmp := filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err
	}
	userArgs := []string{}
	if os.Geteuid() == 0 {
		userArgs = append(userArgs, "--user=root")
	}
	initArgs := append([]string{"--no-defaults", "--datadir=" + data, "--tmpdir=" + tmp, "--auth-root-authentication-method=normal", "--skip-test-db"}, userArgs...)
	if out, err := exec.Command(install, initArgs...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mariadb-install-db: %w\n%s", err, out)
	}
	m := &MariaDB{socket: filepath.Join(dir, "mysqld.sock"), srv: server{name: "mariadbd", bin: bin, logPath: filepath.Join(dir, "mariadbd.log")}}
	grantArgs := []string{"--skip-grant-tables"}
	if grants {
		grantArgs = nil
	}
	m.srv.ready = m.ping
	host := "127.0.0.1"
	if n != nil {
		host, m.srv.bin = n.IP, n.ipPath
	}
	err = onPort(&m.srv, func(port int) {
		m.Addr = fmt.Sprintf("%s:%d", host, port)
		m.srv.args = append([]string{
			"--no-defaults", "--datadir=" + data, "--tmpdir=" + tmp, "--port=" + itoa(port),
			"--bind-address=" + host, "--socket=" + m.socket,
			"--pid-file=" + filepath.Join(dir, "mysqld.pid"), "--skip-name-resolve",
			"--innodb-buffer-pool-size=256M", "--innodb-log-file-size=128M",
			"--max-connections=500", "--log-error=" + filepath.Join(dir, "mariadbd.err"),
		}, append(grantArgs, userArgs...)...)
		if n != nil {
			m.srv.args = n.wrap(bin, m.srv.args)
		}
	})
	if err != nil {
		return nil, err
	}
	if grants {
		if err := m.rootOverTCP(); err != nil {
			_ = m.Kill()
			return nil, err
		}
	}
	return m, nil
}

// rootOverTCP lets root (no password) in over TCP too, as DSN connects.
func (m *MariaDB) rootOverTCP() error {
	db, err := sql.Open("mysql", "root@unix("+m.socket+")/")
	if err != nil {
		return err
	}
	defer db.Close()
	for _, stmt := range []string{
		"CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'",
		"GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION",
	} {
		if _, err := db.Exec(stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return nil
}

func (m *MariaDB) ping() error {
	// Over the socket: root@localhost exists before root@127.0.0.1 does.
	db, err := sql.Open("mysql", "root@unix("+m.socket+")/")
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

// Pause freezes mariadbd (SIGSTOP): connections stay open, nothing answers.
func (m *MariaDB) Pause() error { return m.srv.pause() }

// Resume lets a paused mariadbd go on.
func (m *MariaDB) Resume() error { return m.srv.resume() }

var userSeq atomic.Int64

// RestrictedUser creates a user with every privilege on the database of
// rootDSN and none global (no SUPER, no READ_ONLY ADMIN), as production
// gives the binaries, and returns its DSN. Such a user is refused writes
// while read_only is ON, as after a managed-MySQL failover.
func RestrictedUser(rootDSN string) (string, error) {
	cfg, err := mysql.ParseDSN(rootDSN)
	if err != nil {
		return "", err
	}
	db, err := sql.Open("mysql", rootDSN)
	if err != nil {
		return "", err
	}
	defer db.Close()
	user := fmt.Sprintf("fs%d_%d", os.Getpid(), userSeq.Add(1))
	for _, stmt := range []string{
		"CREATE USER '" + user + "'@'%' IDENTIFIED BY 'pw'",
		"GRANT ALL PRIVILEGES ON `" + cfg.DBName + "`.* TO '" + user + "'@'%'",
	} {
		if _, err := db.Exec(stmt); err != nil {
			return "", fmt.Errorf("%s: %w", stmt, err)
		}
	}
	cfg.User, cfg.Passwd = user, "pw"
	return cfg.FormatDSN(), nil
}

// SetReadOnly sets the server's global read_only through rootDSN.
func SetReadOnly(rootDSN string, on bool) error {
	db, err := sql.Open("mysql", rootDSN)
	if err != nil {
		return err
	}
	defer db.Close()
	v := "OFF"
	if on {
		v = "ON"
	}
	_, err = db.Exec("SET GLOBAL read_only = " + v)
	return err
}

// RoleUser creates user (with password pw) on the server of rootDSN with no
// privilege yet, and returns its DSN on the same database.
func RoleUser(rootDSN, user, pw string) (string, error) {
	cfg, err := mysql.ParseDSN(rootDSN)
	if err != nil {
		return "", err
	}
	if err := ExecAll(rootDSN, "CREATE USER IF NOT EXISTS '"+user+"'@'%' IDENTIFIED BY '"+pw+"'"); err != nil {
		return "", err
	}
	cfg.User, cfg.Passwd = user, pw
	return cfg.FormatDSN(), nil
}

// ExecAll runs statements through dsn, stopping at the first error.
func ExecAll(dsn string, stmts ...string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	for _, stmt := range stmts {
		if _, err := db.Exec(stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return nil
}
