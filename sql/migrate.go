// Package schema embeds flashsale's SQL migrations (the NNNN_name.sql files
// beside this one) and applies them in order.
package schema

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

//go:embed *.sql
var files embed.FS

// Migration is one versioned SQL file.
type Migration struct {
	Version string // file name without .sql, e.g. "0001_init"
	SQL     string
}

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	names, err := fs.Glob(files, "*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]Migration, 0, len(names))
	for _, n := range names {
		b, err := files.ReadFile(n)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: strings.TrimSuffix(n, ".sql"), SQL: string(b)})
	}
	return out, nil
}

// lockName serialises concurrent migrators (two pods starting at once).
const lockName = "flashsale_migrate"

// Apply runs every migration not yet recorded in schema_migrations and
// returns the versions it applied. It holds a MySQL named lock on one
// connection for the whole run, so concurrent callers apply each migration
// once; the statements are idempotent besides, so a run cut short is safe to
// repeat.
func Apply(ctx context.Context, db *sql.DB) ([]string, error) {
	migs, err := Migrations()
	if err != nil {
		return nil, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()

	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 60)", lockName).Scan(&got); err != nil {
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	if !got.Valid || got.Int64 != 1 {
		return nil, errors.New("migration lock: another migrator held it for 60s")
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK(?)", lockName) //nolint:errcheck

	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version VARCHAR(128) NOT NULL PRIMARY KEY,
		applied_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)) ENGINE=InnoDB`); err != nil {
		return nil, fmt.Errorf("schema_migrations: %w", err)
	}
	var applied []string
	for _, m := range migs {
		var n int
		if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations WHERE version = ?", m.Version).Scan(&n); err != nil {
			return applied, err
		}
		if n > 0 {
			continue
		}
		for i, stmt := range Statements(m.SQL) {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return applied, fmt.Errorf("migration %s statement %d: %w", m.Version, i+1, err)
			}
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO schema_migrations (version) VALUES (?)", m.Version); err != nil {
			return applied, fmt.Errorf("record migration %s: %w", m.Version, err)
		}
		applied = append(applied, m.Version)
	}
	return applied, nil
}

// Statements splits a migration into statements at semicolons that end a
// line, dropping "--" comment lines. Migrations keep to that form (no stored
// procedures, no semicolons at the end of a line inside a string).
func Statements(src string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			stmt := strings.TrimSpace(cur.String())
			out = append(out, strings.TrimSuffix(stmt, ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// State is one migration's state in a database.
type State struct {
	Version   string
	AppliedAt *time.Time // nil: not applied
}

// Status returns every embedded migration's state in db, in order; a
// database never migrated has them all pending.
func Status(ctx context.Context, db *sql.DB) ([]State, error) {
	migs, err := Migrations()
	if err != nil {
		return nil, err
	}
	applied := map[string]time.Time{}
	rows, err := db.QueryContext(ctx, "SELECT version, applied_at FROM schema_migrations")
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me) && me.Number == 1146: // no such table: nothing applied yet
	case err != nil:
		return nil, err
	default:
		defer rows.Close()
		for rows.Next() {
			var v string
			var at time.Time
			if err := rows.Scan(&v, &at); err != nil {
				return nil, err
			}
			applied[v] = at
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	out := make([]State, len(migs))
	for i, m := range migs {
		out[i].Version = m.Version
		if at, ok := applied[m.Version]; ok {
			out[i].AppliedAt = &at
		}
	}
	return out, nil
}
