// Command gateway serves flashsale's HTTP API: the buyers' claims, each
// one call of the admission script in Redis, and the admin API. Given a
// command, it runs it instead (pkg/gateway/cli): migrate; smoke, an end
// to end check of a deployment; token and access-codes, what a test of a
// sale needs. "gateway -h" lists them; "gateway help config" the
// FLASHSALE_* variables (docs/CONFIGURATION.md).
package main

import "github.com/flashsale/flashsale/pkg/gateway/cli"

func main() { cli.Main() }
