// Package docs embeds the reference a binary prints: its help config lists each
// variable with the meaning CONFIGURATION.md gives it, so that the two
// cannot say different things.
package docs

import _ "embed"

// Configuration is CONFIGURATION.md.
//
//go:embed CONFIGURATION.md
var Configuration string
