package store

import (
	"context"
	"encoding/json"
	"time"
)

// MCPStore persists the MCP gateway's configuration (internal/mcpgw owns
// its meaning): connectors (upstream MCP servers), virtual servers (named
// bundles of their tools), grants of virtual servers to principals, the
// pinned (hashed) tool definitions an admin approved or has yet to, and
// per-principal connector credentials. It is part of Store.
type MCPStore interface {
	// CreateConnector inserts a connector; the ID must be unique
	// (ErrConflict otherwise).
	CreateConnector(ctx context.Context, c MCPConnector) error
	// GetConnector returns a connector or ErrNotFound.
	GetConnector(ctx context.Context, id string) (MCPConnector, error)
	// ListConnectors returns every connector ordered by ID.
	ListConnectors(ctx context.Context) ([]MCPConnector, error)
	// UpdateConnector is a read-modify-write in one transaction; fn must
	// not change the ID (ErrInvalid).
	UpdateConnector(ctx context.Context, id string, fn func(*MCPConnector) error) (MCPConnector, error)
	// DeleteConnector removes a connector with its pins and credentials
	// (ErrNotFound if there is none; ErrConflict while a virtual server
	// uses it).
	DeleteConnector(ctx context.Context, id string) error

	// CreateMCPServer inserts a virtual server; the ID must be unique
	// and its Connectors must exist (ErrNotFound).
	CreateMCPServer(ctx context.Context, s MCPServer) error
	// GetMCPServer returns a virtual server or ErrNotFound.
	GetMCPServer(ctx context.Context, id string) (MCPServer, error)
	// ListMCPServers returns every virtual server ordered by ID.
	ListMCPServers(ctx context.Context) ([]MCPServer, error)
	// UpdateMCPServer is a read-modify-write in one transaction.
	UpdateMCPServer(ctx context.Context, id string, fn func(*MCPServer) error) (MCPServer, error)
	// DeleteMCPServer removes a virtual server and its grants
	// (ErrNotFound if there is none).
	DeleteMCPServer(ctx context.Context, id string) error

	// PutMCPGrant grants a virtual server to a principal (idempotent: an
	// existing grant is kept as it is). The server and the principal must
	// exist (ErrNotFound).
	PutMCPGrant(ctx context.Context, g MCPGrant) error
	// DeleteMCPGrant revokes it (ErrNotFound if there was none).
	DeleteMCPGrant(ctx context.Context, serverID, principalID string) error
	// ListMCPGrants returns grants matching the filter ("" matches all),
	// ordered by server then principal.
	ListMCPGrants(ctx context.Context, serverID, principalID string) ([]MCPGrant, error)

	// PutToolPin records a tool definition seen upstream. A (Connector,
	// Tool, Hash) already recorded is left as it is (its State kept) and
	// returned; a new one is inserted as given (normally State pending).
	// The connector must exist (ErrNotFound).
	PutToolPin(ctx context.Context, p MCPToolPin) (MCPToolPin, error)
	// ListToolPins returns pins matching the filter, ordered by
	// connector, tool, then FirstSeen.
	ListToolPins(ctx context.Context, f MCPToolPinFilter) ([]MCPToolPin, error)
	// DecideToolPin sets a pin's State (approved or rejected) with who
	// and when (ErrNotFound if there is no such pin). Approving one hash
	// of a tool does not change the others' states; the gateway serves
	// the most recently approved.
	DecideToolPin(ctx context.Context, connector, tool, hash, state, by string, at time.Time) (MCPToolPin, error)

	// PutMCPCredential binds a principal's own credential (a secret in
	// the secrets store) to a connector, replacing an earlier binding.
	// PrincipalID "" is the connector's shared service credential. The
	// connector and a non-empty principal must exist (ErrNotFound).
	PutMCPCredential(ctx context.Context, c MCPCredential) error
	// GetMCPCredential returns the binding or ErrNotFound.
	GetMCPCredential(ctx context.Context, connector, principalID string) (MCPCredential, error)
	// DeleteMCPCredential removes the binding (ErrNotFound if none).
	DeleteMCPCredential(ctx context.Context, connector, principalID string) error
}

// MCP connector kinds.
const (
	MCPConnectorRemote  = "remote"  // a streamable-HTTP (or legacy SSE) URL
	MCPConnectorHosted  = "hosted"  // a stdio server run inside a Warden sandbox
	MCPConnectorBuiltin = "builtin" // Warden's own sandbox tools
)

// MCP tool pin states.
const (
	MCPToolPending  = "pending"
	MCPToolApproved = "approved"
	MCPToolRejected = "rejected"
)

// MCPConnector is a registered upstream MCP server. Spec holds the
// kind's settings as JSON (internal/mcpgw defines and validates them:
// URL and transport for remote, template, command, env, network and
// per-user mode for hosted, the auth method and credential secret), so
// adding a setting needs no migration.
type MCPConnector struct {
	ID          string // 1-63 of a-z0-9-, no "__"
	Kind        string // MCPConnectorRemote, MCPConnectorHosted or MCPConnectorBuiltin
	Description string
	Spec        json.RawMessage
	OwnerID     string // the principal that registered it
	CreatedAt   time.Time
	CreatedBy   string
	UpdatedAt   time.Time
}

// MCPServer is a virtual MCP server: a named bundle of tools from one or
// more connectors. Spec holds its connectors with their prefixes, tool
// allow lists, renames, descriptions and presets as JSON (internal/mcpgw
// defines it).
type MCPServer struct {
	ID          string
	Description string
	Spec        json.RawMessage
	// Connectors are the IDs of the connectors Spec uses (the caller
	// derives them from the parsed spec). The store keeps them as given
	// and enforces them: each must exist (ErrNotFound), none twice
	// (ErrInvalid), and a connector in use cannot be deleted.
	Connectors []string
	CreatedAt  time.Time
	CreatedBy  string
	UpdatedAt  time.Time
}

// MCPGrant gives a principal (a user or an agent) a virtual server.
type MCPGrant struct {
	ServerID    string
	PrincipalID string
	CreatedAt   time.Time
	CreatedBy   string
}

// MCPToolPin is one definition of an upstream tool as the gateway saw it:
// Hash is the hex SHA-256 of its canonical definition (Definition, stored
// byte for byte).
type MCPToolPin struct {
	Connector  string
	Tool       string
	Hash       string
	Definition json.RawMessage
	State      string // MCPToolPending, MCPToolApproved or MCPToolRejected
	FirstSeen  time.Time
	DecidedBy  string
	DecidedAt  time.Time
}

// MCPToolPinFilter selects pins in ListToolPins; zero fields match all.
type MCPToolPinFilter struct {
	Connector string
	Tool      string
	States    []string
}

// MCPCredential binds a credential (a secret's ID in the secrets store)
// to a connector for one principal, or for all ("" = the shared service
// credential). OAuth tokens are stored as secrets too; Kind says which
// (header, oauth).
type MCPCredential struct {
	Connector   string
	PrincipalID string
	Kind        string
	SecretID    string
	CreatedAt   time.Time
	CreatedBy   string
	UpdatedAt   time.Time
}
