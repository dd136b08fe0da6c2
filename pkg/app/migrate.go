package app

// The migrate command every binary has: apply the embedded migrations,
// say which are applied (status), or print what would be (--dry-run).

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	schema "github.com/flashsale/flashsale/sql"
)

func migrateCommand[C Config]() Command[C] {
	var dryRun bool
	common := func(cfg C) error { return cfg.Base().Validate() } // no role's secrets needed
	return Command[C]{Name: "migrate", Task: "Migrations", NArgs: 0, Check: common,
		Summary: "apply the database migrations not yet applied (idempotent, serialised by a lock; the chart's init containers run it)",
		Flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&dryRun, "dry-run", false, "print the SQL of the migrations not yet applied, and apply nothing")
		},
		Run: func(ctx context.Context, cfg C, _ *Runtime, _ []string) error {
			return cfg.Base().Migrate(ctx, os.Stdout, dryRun)
		},
		Sub: []Command[C]{{Name: "status", NArgs: 0, Check: common,
			Summary: "list every migration: applied (when) or pending",
			Run: func(ctx context.Context, cfg C, _ *Runtime, _ []string) error {
				return cfg.Base().MigrateStatus(ctx, os.Stdout)
			}}},
	}
}

// migrateDB opens the database migrations run on: FLASHSALE_MIGRATE_DSN,
// else FLASHSALE_MYSQL_DSN.
func (c Common) migrateDB(ctx context.Context) (*sql.DB, error) {
	if c.MigrateDSN != "" {
		c.MySQLDSN = c.MigrateDSN
	}
	store, err := c.MySQL(ctx) // its errors say what to change
	if err != nil {
		return nil, err
	}
	return store.DB().DB()
}

// explainMySQL says in the README's words what a failure to reach the
// database means, naming the variable to change.
func (c Common) explainMySQL(err error) error {
	dsnVar, dsn := "FLASHSALE_MYSQL_DSN", c.MySQLDSN
	if c.MigrateDSN != "" {
		dsnVar, dsn = "FLASHSALE_MIGRATE_DSN", c.MigrateDSN
	}
	cfg, perr := mysql.ParseDSN(dsn)
	if perr != nil {
		return fmt.Errorf("%s: %w", dsnVar, perr)
	}
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me) && me.Number == 1049: // unknown database
		return fmt.Errorf("the database %q does not exist on %s: create it (mysql -h HOST -e 'CREATE DATABASE %s'), or name another in %s",
			cfg.DBName, cfg.Addr, cfg.DBName, dsnVar)
	case errors.As(err, &me) && (me.Number == 1045 || me.Number == 1044): // access denied
		return fmt.Errorf("MySQL at %s refused user %q (%s): %v", cfg.Addr, cfg.User, dsnVar, me)
	}
	return fmt.Errorf("cannot reach MySQL at %s (%s): %w", cfg.Addr, dsnVar, err)
}

// Migrate applies the embedded migrations not yet applied and says which
// it applied, on w; with dryRun it prints their SQL instead.
func (c Common) Migrate(ctx context.Context, w io.Writer, dryRun bool) error {
	db, err := c.migrateDB(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	if dryRun {
		return printPending(ctx, w, db)
	}
	applied, err := schema.Apply(ctx, db)
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintln(w, "nothing to apply: every migration is applied")
		return nil
	}
	fmt.Fprintf(w, "applied %s\n", strings.Join(applied, ", "))
	return nil
}

// printPending writes the SQL of the migrations db has not applied.
func printPending(ctx context.Context, w io.Writer, db *sql.DB) error {
	states, err := schema.Status(ctx, db)
	if err != nil {
		return err
	}
	migs, err := schema.Migrations()
	if err != nil {
		return err
	}
	pending := 0
	for i, st := range states {
		if st.AppliedAt != nil {
			continue
		}
		pending++
		fmt.Fprintf(w, "-- %s\n", st.Version)
		for _, stmt := range schema.Statements(migs[i].SQL) {
			fmt.Fprintf(w, "%s;\n", stmt)
		}
		fmt.Fprintln(w)
	}
	if pending == 0 {
		fmt.Fprintln(w, "-- nothing to apply: every migration is applied")
	}
	return nil
}

// MigrateStatus writes every migration's state, one a line, on w.
func (c Common) MigrateStatus(ctx context.Context, w io.Writer) error {
	db, err := c.migrateDB(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	states, err := schema.Status(ctx, db)
	if err != nil {
		return err
	}
	for _, st := range states {
		at := "pending"
		if st.AppliedAt != nil {
			at = "applied " + st.AppliedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%-28s %s\n", st.Version, at)
	}
	return nil
}
