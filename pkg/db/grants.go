package db

import (
	"fmt"
	"slices"
	"strings"
)

// Least privilege in MySQL: migrations run as a DDL user
// (FLASHSALE_MIGRATE_DSN), each role as a user with only these DML
// privileges on only these tables. docs/SECURITY.md lists them; the
// end-to-end test runs every role under them.
var roleGrants = map[string]map[string]string{
	// Creates vouchers and their items, pauses and changes them (each
	// with its row of voucher_changes and its voucher_actions), reads orders, marks them paid, cancels them
	// for their owners (the release, the item back), records late
	// payments; reads them all for a sale's report; writes the events of
	// the orders it changes, and reads them for the events API; reads
	// where the events' sinks stand.
	"gateway": {
		"events":          "SELECT, INSERT",
		"event_sequence":  "SELECT",
		"event_sinks":     "SELECT",
		"event_failures":  "SELECT",
		"vouchers":        "SELECT, INSERT, UPDATE",
		"items":           "SELECT, INSERT, UPDATE",
		"orders":          "SELECT, UPDATE",
		"releases":        "SELECT, INSERT, UPDATE",
		"voucher_changes": "SELECT, INSERT, UPDATE",
		"voucher_actions": "SELECT, INSERT",
		"late_payments":   "SELECT, INSERT",
	},
	// Persists batches: orders, the stock, items, releases, their events;
	// the probe.
	"worker": {
		"events":       "INSERT",
		"vouchers":     "SELECT, UPDATE",
		"items":        "SELECT, UPDATE",
		"orders":       "SELECT, INSERT, UPDATE",
		"releases":     "SELECT, INSERT, UPDATE",
		"store_probes": "SELECT, INSERT, UPDATE",
	},
	// The worker's (it processes what it takes over), and cancelling,
	// refunding, applying owed changes and reconciling; a sale's report;
	// the operator's commands and the hot-voucher detector's splits, with
	// their voucher_actions;
	// sequencing the events, relaying them to the sinks (in parts, among
	// the reapers relaying) and deleting them past their retention.
	"reaper": {
		"events":          "SELECT, INSERT, UPDATE, DELETE",
		"event_sequence":  "SELECT, UPDATE",
		"event_sinks":     "SELECT, INSERT, UPDATE, DELETE",
		"event_failures":  "SELECT, INSERT, UPDATE, DELETE",
		"event_relayers":  "SELECT, INSERT, UPDATE, DELETE",
		"vouchers":        "SELECT, UPDATE",
		"items":           "SELECT, UPDATE",
		"orders":          "SELECT, INSERT, UPDATE",
		"releases":        "SELECT, INSERT, UPDATE",
		"store_probes":    "SELECT, INSERT, UPDATE",
		"voucher_changes": "SELECT, UPDATE",
		"voucher_actions": "SELECT, INSERT",
		"late_payments":   "SELECT",
	},
}

// GrantRoles are the roles with grants.
func GrantRoles() []string {
	out := make([]string, 0, len(roleGrants))
	for r := range roleGrants {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// Grants returns the GRANT statements of role for user (a quoted account
// such as 'flashsale_gateway'@'%') on database dbName, tables sorted.
func Grants(role, dbName, user string) ([]string, error) {
	g, ok := roleGrants[role]
	if !ok {
		return nil, fmt.Errorf("no grants for role %q (one of %s)", role, strings.Join(GrantRoles(), ", "))
	}
	tables := make([]string, 0, len(g))
	for t := range g {
		tables = append(tables, t)
	}
	slices.Sort(tables)
	out := make([]string, len(tables))
	for i, t := range tables {
		out[i] = fmt.Sprintf("GRANT %s ON `%s`.`%s` TO %s", g[t], dbName, t, user)
	}
	return out, nil
}
