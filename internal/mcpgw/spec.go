package mcpgw

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/warden-sandbox/warden/internal/store"
)

// The JSON Spec fields of store.MCPConnector and store.MCPServer: what
// each connector kind needs and how a virtual server bundles tools. The
// API (internal/api) stores them after ValidateConnectorSpec and
// ValidateServerSpec accept them; the gateway reads them with
// ParseConnectorSpec and ParseServerSpec.

// RemoteSpec is a remote connector: an upstream MCP server reached over
// streamable HTTP.
type RemoteSpec struct {
	// URL is the upstream's endpoint (https, or http for a host an admin
	// allows; the dialer refuses loopback, link-local, private and the
	// host's own addresses unless allowed).
	URL string `json:"url"`
	// Transport is "streamable" (the default); "sse" is the legacy
	// HTTP+SSE transport.
	Transport string `json:"transport,omitempty"`
	// Auth says how the connector's credential (a secret bound with
	// /v1/mcp/connectors/{id}/credentials) is sent upstream.
	Auth *AuthSpec `json:"auth,omitempty"`
	// TimeoutSeconds bounds one call upstream (default 60, at most 600).
	TimeoutSeconds int `json:"timeout_seconds,omitempty"`
	// OAuth, when set, has Warden obtain the credential with OAuth 2.1
	// (authorization code with PKCE, oauth.go): POST
	// /v1/mcp/connectors/{id}/oauth starts the flow; the tokens are kept
	// in the secrets store and refreshed by the gateway.
	OAuth *OAuthSpec `json:"oauth,omitempty"`
}

// OAuthSpec configures OAuth 2.1 for a remote connector. Everything is
// optional: the authorization server is discovered from the upstream's
// protected resource metadata (RFC 9728), and without ClientID Warden
// registers itself (RFC 7591).
type OAuthSpec struct {
	// ClientID is a client registered with the authorization server
	// beforehand; ClientSecretID, for a confidential client, names the
	// secret (in the secrets store) holding its client secret.
	ClientID       string `json:"client_id,omitempty"`
	ClientSecretID string `json:"client_secret_id,omitempty"`
	// Scopes are asked for (default: the resource's scopes_supported).
	Scopes []string `json:"scopes,omitempty"`
	// AuthorizationServer is the issuer to use when the upstream
	// publishes no protected resource metadata.
	AuthorizationServer string `json:"authorization_server,omitempty"`
}

// AuthSpec is how a credential is sent upstream: the secret's value as
// the header Header (default Authorization), prefixed with Scheme and a
// space when Scheme is set (default "Bearer" for Authorization).
type AuthSpec struct {
	Header string `json:"header,omitempty"`
	Scheme string `json:"scheme,omitempty"`
	// Required refuses calls for a principal with no credential (its own
	// or the shared one) instead of calling upstream without one.
	Required bool `json:"required,omitempty"`
}

// HostedSpec is a hosted connector: a stdio MCP server run inside a
// Warden sandbox (internal/mcpgw/hosted runs it).
type HostedSpec struct {
	Template string            `json:"template,omitempty"`
	Command  []string          `json:"command"`
	Env      map[string]string `json:"env,omitempty"`
	// Network is the sandbox's egress allow list (hosts); empty: none.
	Network []string `json:"network,omitempty"`
	// PerUser runs one sandbox per calling principal instead of one per
	// connector.
	PerUser        bool `json:"per_user,omitempty"`
	TimeoutSeconds int  `json:"timeout_seconds,omitempty"`
}

// BuiltinSpec is the builtin connector: Warden's own sandbox tools.
// Tools, when set, limits the tools it offers (default all the sandbox
// tools); the memory tools (memory_remember, memory_recall, memory_list,
// memory_forget: the calling agent's own memory) are offered only when
// listed here.
type BuiltinSpec struct {
	Tools []string `json:"tools,omitempty"`
}

// ServerSpec is a virtual MCP server: the connectors it bundles.
type ServerSpec struct {
	Connectors []ServerConnector `json:"connectors"`
	// Instructions, if set, are the server's instructions to clients.
	Instructions string `json:"instructions,omitempty"`
}

// ServerConnector is one connector of a virtual server.
type ServerConnector struct {
	Connector string `json:"connector"`
	// Prefix names its tools "<prefix>__<tool>". Default: the connector's
	// ID when the server bundles several connectors, none when it has one
	// (its tools keep their names). "-" forces no prefix.
	Prefix string `json:"prefix,omitempty"`
	// Tools is the allow list; empty allows every (approved) tool.
	Tools []ToolRule `json:"tools,omitempty"`
	// Preset "read-only" allows only tools annotated readOnlyHint.
	Preset string `json:"preset,omitempty"`
}

// ToolRule allows one upstream tool, optionally renamed or described
// differently.
type ToolRule struct {
	Name        string `json:"name"`
	Rename      string `json:"rename,omitempty"`
	Description string `json:"description,omitempty"`
}

// PresetReadOnly is ServerConnector.Preset for read-only tools.
const PresetReadOnly = "read-only"

// Limits on names: connector IDs follow store.MCPConnector; exposed tool
// names are at most 64 characters (a common model-API function-name
// limit) of [A-Za-z0-9_.-].
var (
	connectorIDRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	toolNameRE    = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)
	prefixRE      = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)
)

// MaxToolName is the longest tool name a virtual server exposes.
const MaxToolName = 64

// ValidConnectorID reports whether id is a valid connector ID: 1-63 of
// a-z0-9-, starting and ending with a letter or digit, without "__"
// (which separates prefixes from tool names; "-" cannot form it anyway).
func ValidConnectorID(id string) bool {
	return connectorIDRE.MatchString(id) && !strings.Contains(id, "__")
}

// decodeStrict decodes raw into v refusing unknown fields and trailing
// data.
func decodeStrict(raw json.RawMessage, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	if dec.More() {
		return fmt.Errorf("spec: trailing data")
	}
	return nil
}

// ValidateConnectorSpec checks a connector's kind and spec. Its errors
// are meant for the caller (an API 400).
func ValidateConnectorSpec(kind string, raw json.RawMessage) error {
	_, err := ParseConnectorSpec(kind, raw)
	return err
}

// ParseConnectorSpec decodes and checks a connector's spec: a
// *RemoteSpec, *HostedSpec or *BuiltinSpec by kind.
func ParseConnectorSpec(kind string, raw json.RawMessage) (any, error) {
	switch kind {
	case store.MCPConnectorRemote:
		var s RemoteSpec
		if err := decodeStrict(raw, &s); err != nil {
			return nil, err
		}
		return &s, s.validate()
	case store.MCPConnectorHosted:
		var s HostedSpec
		if err := decodeStrict(raw, &s); err != nil {
			return nil, err
		}
		return &s, s.validate()
	case store.MCPConnectorBuiltin:
		var s BuiltinSpec
		if err := decodeStrict(raw, &s); err != nil {
			return nil, err
		}
		return &s, s.validate()
	}
	return nil, fmt.Errorf("kind: %q is not one of remote, hosted, builtin", kind)
}

func (s *RemoteSpec) validate() error {
	if s.URL == "" {
		return fmt.Errorf("url: required")
	}
	u, err := url.Parse(s.URL)
	if err != nil {
		return fmt.Errorf("url: %w", err)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return fmt.Errorf("url: scheme must be https or http")
	}
	if u.Host == "" || u.User != nil || u.Fragment != "" {
		return fmt.Errorf("url: needs a host, and no user info or fragment")
	}
	switch s.Transport {
	case "", "streamable", "sse":
	default:
		return fmt.Errorf("transport: %q is not streamable or sse", s.Transport)
	}
	if s.TimeoutSeconds < 0 || s.TimeoutSeconds > 600 {
		return fmt.Errorf("timeout_seconds: 0 to 600")
	}
	if a := s.Auth; a != nil {
		if a.Header != "" && !validHeaderName(a.Header) {
			return fmt.Errorf("auth.header: %q is not a header name", a.Header)
		}
		switch strings.ToLower(a.Header) {
		case "cookie", "host", "content-length", "transfer-encoding", "connection", "mcp-session-id", "mcp-protocol-version":
			return fmt.Errorf("auth.header: %q cannot carry a credential", a.Header)
		}
		if strings.ContainsAny(a.Scheme, " \r\n\t") {
			return fmt.Errorf("auth.scheme: one word")
		}
	}
	if o := s.OAuth; o != nil {
		if s.Auth != nil && (s.Auth.Header != "" || s.Auth.Scheme != "") {
			return fmt.Errorf("oauth: the access token is sent as Authorization: Bearer; drop auth.header and auth.scheme")
		}
		if o.AuthorizationServer != "" {
			if u, err := url.Parse(o.AuthorizationServer); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				return fmt.Errorf("oauth.authorization_server: an http(s) URL")
			}
		}
		for _, sc := range o.Scopes {
			if sc == "" || strings.ContainsAny(sc, " \r\n\t\"\\") {
				return fmt.Errorf("oauth.scopes: %q is not a scope", sc)
			}
		}
		if len(o.ClientID) > 256 || strings.ContainsAny(o.ClientID, "\r\n") {
			return fmt.Errorf("oauth.client_id: at most 256 characters, one line")
		}
	}
	return nil
}

func validHeaderName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

func (s *HostedSpec) validate() error {
	if len(s.Command) == 0 || s.Command[0] == "" {
		return fmt.Errorf("command: required")
	}
	for k := range s.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("env: invalid name %q", k)
		}
	}
	if s.TimeoutSeconds < 0 || s.TimeoutSeconds > 600 {
		return fmt.Errorf("timeout_seconds: 0 to 600")
	}
	return nil
}

func (s *BuiltinSpec) validate() error {
	for _, t := range s.Tools {
		if !isBuiltinTool(t) {
			return fmt.Errorf("tools: %q is not a builtin tool (%s)", t, strings.Join(builtinToolNames(), ", "))
		}
	}
	return nil
}

// ValidateServerSpec checks a virtual server's spec (not that its
// connectors exist: the API checks that against the store).
func ValidateServerSpec(raw json.RawMessage) error {
	_, err := ParseServerSpec(raw)
	return err
}

// ParseServerSpec decodes and checks a virtual server's spec.
func ParseServerSpec(raw json.RawMessage) (*ServerSpec, error) {
	var s ServerSpec
	if err := decodeStrict(raw, &s); err != nil {
		return nil, err
	}
	if len(s.Connectors) == 0 {
		return nil, fmt.Errorf("connectors: at least one")
	}
	if len(s.Connectors) > 64 {
		return nil, fmt.Errorf("connectors: at most 64")
	}
	seen := map[string]bool{}
	prefixes := map[string]bool{}
	for i, c := range s.Connectors {
		if !ValidConnectorID(c.Connector) {
			return nil, fmt.Errorf("connectors[%d].connector: %q is not a connector id", i, c.Connector)
		}
		if seen[c.Connector] {
			return nil, fmt.Errorf("connectors[%d]: connector %q listed twice", i, c.Connector)
		}
		seen[c.Connector] = true
		if c.Prefix != "" && c.Prefix != "-" && !prefixRE.MatchString(c.Prefix) {
			return nil, fmt.Errorf("connectors[%d].prefix: 1-32 of a-z0-9- (or \"-\" for none)", i)
		}
		p := s.prefixOf(i)
		if p != "" {
			if prefixes[p] {
				return nil, fmt.Errorf("connectors[%d].prefix: %q used twice", i, p)
			}
			prefixes[p] = true
		}
		switch c.Preset {
		case "", PresetReadOnly:
		default:
			return nil, fmt.Errorf("connectors[%d].preset: %q is not %q", i, c.Preset, PresetReadOnly)
		}
		names := map[string]bool{}
		for j, t := range c.Tools {
			if !toolNameRE.MatchString(t.Name) {
				return nil, fmt.Errorf("connectors[%d].tools[%d].name: 1-128 of A-Za-z0-9_.-", i, j)
			}
			if names[t.Name] {
				return nil, fmt.Errorf("connectors[%d].tools[%d]: %q listed twice", i, j, t.Name)
			}
			names[t.Name] = true
			if t.Rename != "" && !toolNameRE.MatchString(t.Rename) {
				return nil, fmt.Errorf("connectors[%d].tools[%d].rename: 1-128 of A-Za-z0-9_.-", i, j)
			}
			if strings.Contains(t.Rename, "__") {
				return nil, fmt.Errorf("connectors[%d].tools[%d].rename: no \"__\" (it separates prefixes)", i, j)
			}
			if len(t.Description) > 8192 {
				return nil, fmt.Errorf("connectors[%d].tools[%d].description: at most 8192 bytes", i, j)
			}
			if len(exposedName(p, toolRename(t))) > MaxToolName {
				return nil, fmt.Errorf("connectors[%d].tools[%d]: the exposed name %q is over %d characters",
					i, j, exposedName(p, toolRename(t)), MaxToolName)
			}
		}
	}
	if len(s.Instructions) > 16384 {
		return nil, fmt.Errorf("instructions: at most 16384 bytes")
	}
	return &s, nil
}

// prefixOf is the prefix of the i-th connector's tools ("" for none).
func (s *ServerSpec) prefixOf(i int) string {
	c := s.Connectors[i]
	switch {
	case c.Prefix == "-":
		return ""
	case c.Prefix != "":
		return c.Prefix
	case len(s.Connectors) == 1:
		return ""
	}
	return c.Connector
}

func toolRename(t ToolRule) string {
	if t.Rename != "" {
		return t.Rename
	}
	return t.Name
}

// exposedName is the name a client sees: prefix__name, or name.
func exposedName(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "__" + name
}

// ServerSpecConnectors returns the connector IDs a virtual server's spec
// uses (in its order), after checking the spec.
func ServerSpecConnectors(raw json.RawMessage) ([]string, error) {
	s, err := ParseServerSpec(raw)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(s.Connectors))
	for i, c := range s.Connectors {
		out[i] = c.Connector
	}
	return out, nil
}
