// Package api embeds the API's reference, openapi.yaml, which the gateway
// serves at /openapi.yaml beside its index page.
package api

import _ "embed"

// OpenAPI is openapi.yaml's bytes.
//
//go:embed openapi.yaml
var OpenAPI []byte
