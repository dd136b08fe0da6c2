// Package apiclient is a client of the gateway generated from
// api/openapi.yaml by oapi-codegen, the way a user of the API would make
// one. Its tests drive a sale through the real gateway with it and check
// every answer against the spec (kin-openapi's openapi3filter), so the
// spec is held to what the gateway really says.
package apiclient

//go:generate go tool oapi-codegen -config oapi-codegen.yaml ../../../api/openapi.yaml
