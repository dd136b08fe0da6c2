// Command worker persists admitted orders from the Redis streams to MySQL
// (pkg/worker), in batches, acknowledging each after its commit. Given a
// command, it runs it instead (pkg/worker/cli): migrate. "worker -h" lists
// them; "worker help config" the FLASHSALE_* variables
// (docs/CONFIGURATION.md).
package main

import "github.com/flashsale/flashsale/pkg/worker/cli"

func main() { cli.Main() }
