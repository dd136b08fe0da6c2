// Command reaper takes over entries crashed workers left pending,
// dead-letters poison entries, cancels unpaid orders and releases their
// stock. "reaper reconcile [--repair]" compares Redis with MySQL and the
// streams (and rebuilds Redis), "reaper deadletters" handles the dead
// letters, "reaper report VOUCHER_ID" accounts for a sale and "reaper
// migrate" applies the migrations: pkg/reaper/cli. Configuration:
// FLASHSALE_* variables (docs/CONFIGURATION.md).
package main

import "github.com/flashsale/flashsale/pkg/reaper/cli"

func main() { cli.Main() }
