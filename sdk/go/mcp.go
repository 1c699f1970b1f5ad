package warden

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The MCP gateway's configuration (/v1/mcp): connectors (upstream MCP
// servers), virtual servers that bundle their tools, grants of virtual
// servers to principals, pinned tool definitions held for approval, and
// credential bindings. The gateway serves each virtual server at
// MCPServerURL, with an API key holding mcp:use as the bearer token.

// MCP connector kinds.
const (
	MCPConnectorRemote  = "remote"  // a streamable-HTTP (or legacy SSE) URL
	MCPConnectorHosted  = "hosted"  // a stdio server run inside a Warden sandbox
	MCPConnectorBuiltin = "builtin" // Warden's own sandbox tools
)

// MCP tool definition states.
const (
	MCPToolPending  = "pending"
	MCPToolApproved = "approved"
	MCPToolRejected = "rejected"
)

// MCPConnector is a registered upstream MCP server. Spec holds the
// kind's settings (docs/mcp.md).
type MCPConnector struct {
	ID          string          `json:"id"`
	Kind        string          `json:"kind"`
	Description string          `json:"description"`
	Spec        json.RawMessage `json:"spec"`
	OwnerID     string          `json:"owner_id"`
	CreatedAt   time.Time       `json:"created_at"`
	CreatedBy   string          `json:"created_by"`
	UpdatedAt   time.Time       `json:"updated_at"`
}

// MCPConnectorWrite is a connector as clients write it. On update, ID and
// Kind may be left empty (neither can change).
type MCPConnectorWrite struct {
	ID          string          `json:"id,omitempty"`
	Kind        string          `json:"kind,omitempty"`
	Description string          `json:"description,omitempty"`
	Spec        json.RawMessage `json:"spec,omitempty"`
}

// MCPServer is a virtual MCP server, served at Path on the API's address.
type MCPServer struct {
	ID          string          `json:"id"`
	Description string          `json:"description"`
	Spec        json.RawMessage `json:"spec"`
	Connectors  []string        `json:"connectors"`
	Path        string          `json:"path"`
	CreatedAt   time.Time       `json:"created_at"`
	CreatedBy   string          `json:"created_by"`
	UpdatedAt   time.Time       `json:"updated_at"`
}

// MCPServerWrite is a virtual server as clients write it.
type MCPServerWrite struct {
	ID          string          `json:"id,omitempty"`
	Description string          `json:"description,omitempty"`
	Spec        json.RawMessage `json:"spec"`
}

// MCPGrant gives a principal a virtual server.
type MCPGrant struct {
	ServerID    string    `json:"server_id"`
	PrincipalID string    `json:"principal_id"`
	CreatedAt   time.Time `json:"created_at"`
	CreatedBy   string    `json:"created_by"`
}

// MCPTool is one pinned definition of an upstream tool.
type MCPTool struct {
	Connector  string          `json:"connector"`
	Tool       string          `json:"tool"`
	Hash       string          `json:"hash"`
	Definition json.RawMessage `json:"definition"`
	State      string          `json:"state"`
	FirstSeen  time.Time       `json:"first_seen"`
	DecidedBy  string          `json:"decided_by,omitempty"`
	DecidedAt  *time.Time      `json:"decided_at,omitempty"`
}

// MCPToolQuery selects pinned definitions; zero fields match all.
type MCPToolQuery struct {
	States    []string
	Connector string
	Tool      string
}

// MCPCredential is a secret bound as a principal's credential of a
// connector (PrincipalID "" for the shared service credential).
type MCPCredential struct {
	Connector   string    `json:"connector"`
	PrincipalID string    `json:"principal_id"`
	Kind        string    `json:"kind"`
	SecretID    string    `json:"secret_id"`
	CreatedAt   time.Time `json:"created_at"`
	CreatedBy   string    `json:"created_by"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// MCPCredentialWrite binds one of the caller's secrets to a connector:
// for the caller by default, for PrincipalID or as the Shared credential
// with mcp:admin. Kind is header (default) or oauth.
type MCPCredentialWrite struct {
	SecretID    string `json:"secret_id"`
	Kind        string `json:"kind,omitempty"`
	PrincipalID string `json:"principal_id,omitempty"`
	Shared      bool   `json:"shared,omitempty"`
}

// CreateMCPConnector registers a connector.
func (c *Client) CreateMCPConnector(ctx context.Context, w MCPConnectorWrite) (MCPConnector, error) {
	var out MCPConnector
	if err := c.do(ctx, &request{method: http.MethodPost, path: "/v1/mcp/connectors", json: w}, &out); err != nil {
		return out, fmt.Errorf("create mcp connector %s: %w", w.ID, err)
	}
	return out, nil
}

// ListMCPConnectors lists the connectors, ordered by id.
func (c *Client) ListMCPConnectors(ctx context.Context) ([]MCPConnector, error) {
	var out struct {
		Connectors []MCPConnector `json:"connectors"`
	}
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/mcp/connectors", idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("list mcp connectors: %w", err)
	}
	return out.Connectors, nil
}

// GetMCPConnector returns a connector.
func (c *Client) GetMCPConnector(ctx context.Context, id string) (MCPConnector, error) {
	var out MCPConnector
	if err := c.do(ctx, &request{method: http.MethodGet, path: pathf("/v1/mcp/connectors/%s", id), idempotent: true}, &out); err != nil {
		return out, fmt.Errorf("get mcp connector %s: %w", id, err)
	}
	return out, nil
}

// UpdateMCPConnector replaces a connector's description and spec.
func (c *Client) UpdateMCPConnector(ctx context.Context, id string, w MCPConnectorWrite) (MCPConnector, error) {
	var out MCPConnector
	if err := c.do(ctx, &request{method: http.MethodPut, path: pathf("/v1/mcp/connectors/%s", id), json: w, idempotent: true}, &out); err != nil {
		return out, fmt.Errorf("update mcp connector %s: %w", id, err)
	}
	return out, nil
}

// DeleteMCPConnector removes a connector with its pinned tools and
// credential bindings; one a virtual server uses is a 409 *APIError.
func (c *Client) DeleteMCPConnector(ctx context.Context, id string) error {
	if err := c.do(ctx, &request{method: http.MethodDelete, path: pathf("/v1/mcp/connectors/%s", id), idempotent: true}, nil); err != nil {
		return fmt.Errorf("delete mcp connector %s: %w", id, err)
	}
	return nil
}

// PutMCPCredential binds a secret as a credential of a connector.
func (c *Client) PutMCPCredential(ctx context.Context, connector string, w MCPCredentialWrite) (MCPCredential, error) {
	var out MCPCredential
	if err := c.do(ctx, &request{method: http.MethodPut, path: pathf("/v1/mcp/connectors/%s/credentials", connector), json: w, idempotent: true}, &out); err != nil {
		return out, fmt.Errorf("put mcp credential of %s: %w", connector, err)
	}
	return out, nil
}

// DeleteMCPCredential removes a credential binding: the caller's own
// (principal "" and shared false), another principal's, or the shared one.
func (c *Client) DeleteMCPCredential(ctx context.Context, connector, principal string, shared bool) error {
	q := url.Values{}
	if principal != "" {
		q.Set("principal", principal)
	}
	if shared {
		q.Set("shared", "true")
	}
	if err := c.do(ctx, &request{method: http.MethodDelete, path: pathf("/v1/mcp/connectors/%s/credentials", connector), query: q, idempotent: true}, nil); err != nil {
		return fmt.Errorf("delete mcp credential of %s: %w", connector, err)
	}
	return nil
}

// CreateMCPServer creates a virtual server.
func (c *Client) CreateMCPServer(ctx context.Context, w MCPServerWrite) (MCPServer, error) {
	var out MCPServer
	if err := c.do(ctx, &request{method: http.MethodPost, path: "/v1/mcp/servers", json: w}, &out); err != nil {
		return out, fmt.Errorf("create mcp server %s: %w", w.ID, err)
	}
	return out, nil
}

// ListMCPServers lists the virtual servers (with mcp:use alone, those
// granted to the caller).
func (c *Client) ListMCPServers(ctx context.Context) ([]MCPServer, error) {
	var out struct {
		Servers []MCPServer `json:"servers"`
	}
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/mcp/servers", idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("list mcp servers: %w", err)
	}
	return out.Servers, nil
}

// GetMCPServer returns a virtual server.
func (c *Client) GetMCPServer(ctx context.Context, id string) (MCPServer, error) {
	var out MCPServer
	if err := c.do(ctx, &request{method: http.MethodGet, path: pathf("/v1/mcp/servers/%s", id), idempotent: true}, &out); err != nil {
		return out, fmt.Errorf("get mcp server %s: %w", id, err)
	}
	return out, nil
}

// UpdateMCPServer replaces a virtual server's description and spec.
func (c *Client) UpdateMCPServer(ctx context.Context, id string, w MCPServerWrite) (MCPServer, error) {
	var out MCPServer
	if err := c.do(ctx, &request{method: http.MethodPut, path: pathf("/v1/mcp/servers/%s", id), json: w, idempotent: true}, &out); err != nil {
		return out, fmt.Errorf("update mcp server %s: %w", id, err)
	}
	return out, nil
}

// DeleteMCPServer removes a virtual server and its grants.
func (c *Client) DeleteMCPServer(ctx context.Context, id string) error {
	if err := c.do(ctx, &request{method: http.MethodDelete, path: pathf("/v1/mcp/servers/%s", id), idempotent: true}, nil); err != nil {
		return fmt.Errorf("delete mcp server %s: %w", id, err)
	}
	return nil
}

// GrantMCPServer grants a virtual server to a principal (idempotent).
func (c *Client) GrantMCPServer(ctx context.Context, server, principal string) (MCPGrant, error) {
	var out MCPGrant
	if err := c.do(ctx, &request{method: http.MethodPut, path: pathf("/v1/mcp/servers/%s/grants/%s", server, principal), idempotent: true}, &out); err != nil {
		return out, fmt.Errorf("grant mcp server %s to %s: %w", server, principal, err)
	}
	return out, nil
}

// RevokeMCPServer revokes a virtual server from a principal.
func (c *Client) RevokeMCPServer(ctx context.Context, server, principal string) error {
	if err := c.do(ctx, &request{method: http.MethodDelete, path: pathf("/v1/mcp/servers/%s/grants/%s", server, principal), idempotent: true}, nil); err != nil {
		return fmt.Errorf("revoke mcp server %s from %s: %w", server, principal, err)
	}
	return nil
}

// ListMCPGrants lists the principals a virtual server is granted to.
func (c *Client) ListMCPGrants(ctx context.Context, server string) ([]MCPGrant, error) {
	var out struct {
		Grants []MCPGrant `json:"grants"`
	}
	if err := c.do(ctx, &request{method: http.MethodGet, path: pathf("/v1/mcp/servers/%s/grants", server), idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("list grants of mcp server %s: %w", server, err)
	}
	return out.Grants, nil
}

// ListMCPTools lists pinned tool definitions.
func (c *Client) ListMCPTools(ctx context.Context, q MCPToolQuery) ([]MCPTool, error) {
	v := url.Values{}
	if len(q.States) > 0 {
		v.Set("state", strings.Join(q.States, ","))
	}
	if q.Connector != "" {
		v.Set("connector", q.Connector)
	}
	if q.Tool != "" {
		v.Set("tool", q.Tool)
	}
	var out struct {
		Tools []MCPTool `json:"tools"`
	}
	if err := c.do(ctx, &request{method: http.MethodGet, path: "/v1/mcp/tools", query: v, idempotent: true}, &out); err != nil {
		return nil, fmt.Errorf("list mcp tools: %w", err)
	}
	return out.Tools, nil
}

// ApproveMCPTool approves one definition of a tool: clients are served
// the most recently approved.
func (c *Client) ApproveMCPTool(ctx context.Context, connector, tool, hash string) (MCPTool, error) {
	return c.decideMCPTool(ctx, connector, tool, hash, "approve")
}

// RejectMCPTool rejects one definition of a tool: it is never served.
func (c *Client) RejectMCPTool(ctx context.Context, connector, tool, hash string) (MCPTool, error) {
	return c.decideMCPTool(ctx, connector, tool, hash, "reject")
}

func (c *Client) decideMCPTool(ctx context.Context, connector, tool, hash, op string) (MCPTool, error) {
	var out MCPTool
	if err := c.do(ctx, &request{method: http.MethodPost, path: pathf("/v1/mcp/tools/%s/%s/%s/"+op, connector, tool, hash), idempotent: true}, &out); err != nil {
		return out, fmt.Errorf("%s mcp tool %s/%s: %w", op, connector, tool, err)
	}
	return out, nil
}

// MCPServerURL is the streamable-HTTP URL of a virtual server that MCP
// clients connect to, with an API key holding mcp:use as bearer token.
func (c *Client) MCPServerURL(id string) string {
	return strings.TrimSuffix(c.BaseURL(), "/") + "/mcp/v/" + url.PathEscape(id)
}
