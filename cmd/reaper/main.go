// Command reaper runs the reaper role (pkg/reaper: its services take over
// what crashed workers left, cancel unpaid orders and give their units
// back, finish what the stores owe each other, relay the order events,
// split hot vouchers) and, given a command, the operator's tasks
// (pkg/reaper/cli): create, pause, resume, top up, split and extend a
// sale; reconcile the stores; handle dead letters; report a sale; verify
// a draw; follow and redeliver the events; migrate. "reaper -h" lists
// them; "reaper help config" the FLASHSALE_* variables
// (docs/CONFIGURATION.md).
package main

import "github.com/flashsale/flashsale/pkg/reaper/cli"

func main() { cli.Main() }
