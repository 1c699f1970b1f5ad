-- 0008: the MCP gateway (internal/mcpgw). Connector and virtual server
-- settings are stored as opaque JSON specs that mcpgw validates; the store
-- keeps only the references it enforces: which connectors a virtual server
-- uses (a connector in use cannot be deleted), grants to principals, the
-- pinned tool definitions of each connector and per-principal credential
-- bindings (both removed with their connector).

CREATE TABLE mcp_connectors (
	id          TEXT PRIMARY KEY,
	kind        TEXT NOT NULL CHECK (kind IN ('remote', 'hosted', 'builtin')),
	description TEXT NOT NULL,
	spec        TEXT NOT NULL, -- JSON
	owner_id    TEXT NOT NULL,
	created_at  INTEGER NOT NULL,
	created_by  TEXT NOT NULL,
	updated_at  INTEGER NOT NULL
) STRICT;

CREATE TABLE mcp_servers (
	id          TEXT PRIMARY KEY,
	description TEXT NOT NULL,
	spec        TEXT NOT NULL, -- JSON
	connectors  TEXT NOT NULL, -- JSON array of connector IDs, as given
	created_at  INTEGER NOT NULL,
	created_by  TEXT NOT NULL,
	updated_at  INTEGER NOT NULL
) STRICT;

-- The connectors a virtual server uses (mcp_servers.connectors as rows):
-- deleting a used connector fails on the foreign key.
CREATE TABLE mcp_server_connectors (
	server_id    TEXT NOT NULL REFERENCES mcp_servers (id) ON DELETE CASCADE,
	connector_id TEXT NOT NULL REFERENCES mcp_connectors (id),
	PRIMARY KEY (server_id, connector_id)
) STRICT, WITHOUT ROWID;

CREATE INDEX mcp_server_connectors_by_connector ON mcp_server_connectors (connector_id);

CREATE TABLE mcp_grants (
	server_id    TEXT NOT NULL REFERENCES mcp_servers (id) ON DELETE CASCADE,
	principal_id TEXT NOT NULL REFERENCES principals (id),
	created_at   INTEGER NOT NULL,
	created_by   TEXT NOT NULL,
	PRIMARY KEY (server_id, principal_id)
) STRICT, WITHOUT ROWID;

CREATE INDEX mcp_grants_by_principal ON mcp_grants (principal_id, server_id);

CREATE TABLE mcp_tool_pins (
	connector_id TEXT NOT NULL REFERENCES mcp_connectors (id) ON DELETE CASCADE,
	tool         TEXT NOT NULL,
	hash         TEXT NOT NULL, -- hex SHA-256 of the canonical definition
	definition   TEXT NOT NULL, -- JSON, byte for byte
	state        TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'rejected')),
	first_seen   INTEGER NOT NULL,
	decided_by   TEXT NOT NULL,
	decided_at   INTEGER,
	PRIMARY KEY (connector_id, tool, hash)
) STRICT, WITHOUT ROWID;

CREATE INDEX mcp_tool_pins_by_state ON mcp_tool_pins (state, connector_id, tool);

CREATE TABLE mcp_credentials (
	connector_id TEXT NOT NULL REFERENCES mcp_connectors (id) ON DELETE CASCADE,
	principal_id TEXT NOT NULL, -- '' for the connector's shared service credential
	kind         TEXT NOT NULL,
	secret_id    TEXT NOT NULL,
	created_at   INTEGER NOT NULL,
	created_by   TEXT NOT NULL,
	updated_at   INTEGER NOT NULL,
	PRIMARY KEY (connector_id, principal_id)
) STRICT, WITHOUT ROWID;
