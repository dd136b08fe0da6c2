// Package db owns flashsale's MySQL state: vouchers, their items and
// changes, orders, their releases and late payments, the events outbox,
// and the store probes (sql/ holds the tables).
//
// # The tables
//
// What they make:
//
//   - vouchers: stock is the units not taken by a persisted order.
//     CHECK (stock >= 0 AND stock <= stock_total).
//   - orders: id is the order id and the primary key. status is one of
//     created, paid, completed, cancelled, failed, stored as the same
//     word the API returns. An order of a pooled voucher names its item,
//     with the item's amount or code copied.
//   - voucher_changes (0007, 0010) and releases (0002): what MySQL
//     owes Redis, one row per write (pkg/settle).
//   - voucher_actions (0020): who did what to a voucher, one row per
//     action, written with the change (actions.go).
//   - orders.persisted_at (0009): when the order reached MySQL (the
//     server's clock, a column default: the workers' insert is unchanged),
//     for a sale's report.
//   - items (0006): one row per envelope or code, (voucher_id, item) the
//     key, order_id unique (one holder at most), refunded for an envelope
//     refunded to the sender.
//
// The primary key makes a duplicate delivery harmless. orders carries one
// more index, (voucher_id, user_id, status), for the per-user counts and
// the admin's per-status counts, and (status, expires_at) for the reaper;
// every index costs each insert, and inserts are the workers' main cost
// (docs/BENCHMARKS.md). docs/ARCHITECTURE.md lists the migrations.
package db
