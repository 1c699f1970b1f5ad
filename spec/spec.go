// Package spec holds the Warden HTTP API's OpenAPI document, the source of truth for the
// daemon's routes, the SDKs and the generated reference in docs/api.md.
package spec

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document (YAML) describing the Warden HTTP API, version 1.
// The daemon serves it at GET /v1/openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
