package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

var _ store.MCPStore = (*Store)(nil)

const mcpConnectorColumns = `id, kind, description, spec, owner_id, created_at, created_by, updated_at`

const mcpServerColumns = `id, description, spec, connectors, created_at, created_by, updated_at`

const mcpPinColumns = `connector_id, tool, hash, definition, state, first_seen, decided_by, decided_at`

const mcpCredentialColumns = `connector_id, principal_id, kind, secret_id, created_at, created_by, updated_at`

func validConnector(c store.MCPConnector) error {
	switch {
	case c.ID == "":
		return fmt.Errorf("empty id: %w", store.ErrInvalid)
	case c.Kind != store.MCPConnectorRemote && c.Kind != store.MCPConnectorHosted && c.Kind != store.MCPConnectorBuiltin:
		return fmt.Errorf("kind %q: want remote, hosted or builtin: %w", c.Kind, store.ErrInvalid)
	case len(c.Spec) == 0 || !json.Valid(c.Spec):
		return fmt.Errorf("spec is not JSON: %w", store.ErrInvalid)
	case c.CreatedAt.IsZero() || c.UpdatedAt.IsZero():
		return fmt.Errorf("created_at and updated_at are required: %w", store.ErrInvalid)
	}
	return nil
}

// CreateConnector implements store.MCPStore.
func (s *Store) CreateConnector(ctx context.Context, c store.MCPConnector) error {
	if err := validConnector(c); err != nil {
		return fmt.Errorf("create mcp connector %s: %w", c.ID, err)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO mcp_connectors (`+mcpConnectorColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			c.ID, c.Kind, c.Description, string(c.Spec), c.OwnerID, nanos(c.CreatedAt), c.CreatedBy, nanos(c.UpdatedAt))
		if isUnique(err) {
			return fmt.Errorf("id in use: %w", store.ErrConflict)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create mcp connector %s: %w", c.ID, err)
	}
	return nil
}

// GetConnector implements store.MCPStore.
func (s *Store) GetConnector(ctx context.Context, id string) (store.MCPConnector, error) {
	c, err := scanConnector(s.reader.QueryRowContext(ctx, `SELECT `+mcpConnectorColumns+` FROM mcp_connectors WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.MCPConnector{}, fmt.Errorf("mcp connector %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.MCPConnector{}, fmt.Errorf("get mcp connector %s: %w", id, err)
	}
	return c, nil
}

// ListConnectors implements store.MCPStore.
func (s *Store) ListConnectors(ctx context.Context) ([]store.MCPConnector, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+mcpConnectorColumns+` FROM mcp_connectors ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list mcp connectors: %w", err)
	}
	out, err := collect(rows, scanConnector)
	if err != nil {
		return nil, fmt.Errorf("list mcp connectors: %w", err)
	}
	return out, nil
}

// UpdateConnector implements store.MCPStore.
func (s *Store) UpdateConnector(ctx context.Context, id string, fn func(*store.MCPConnector) error) (store.MCPConnector, error) {
	var out store.MCPConnector
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		c, err := scanConnector(tx.QueryRowContext(ctx, `SELECT `+mcpConnectorColumns+` FROM mcp_connectors WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if err := fn(&c); err != nil {
			return err
		}
		if c.ID != id {
			return fmt.Errorf("the update changed the id: %w", store.ErrInvalid)
		}
		if err := validConnector(c); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE mcp_connectors SET kind = ?, description = ?, spec = ?, owner_id = ?,
				created_at = ?, created_by = ?, updated_at = ? WHERE id = ?`,
			c.Kind, c.Description, string(c.Spec), c.OwnerID, nanos(c.CreatedAt), c.CreatedBy, nanos(c.UpdatedAt), id); err != nil {
			return err
		}
		out = c
		return nil
	})
	if err != nil {
		return store.MCPConnector{}, fmt.Errorf("update mcp connector %s: %w", id, err)
	}
	return out, nil
}

// DeleteConnector implements store.MCPStore.
func (s *Store) DeleteConnector(ctx context.Context, id string) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var servers []string
		rows, err := tx.QueryContext(ctx, `SELECT server_id FROM mcp_server_connectors WHERE connector_id = ? ORDER BY server_id`, id)
		if err != nil {
			return err
		}
		for rows.Next() {
			var sid string
			if err := rows.Scan(&sid); err != nil {
				rows.Close()
				return err
			}
			servers = append(servers, sid)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if len(servers) > 0 {
			return fmt.Errorf("used by virtual server %s: %w", strings.Join(servers, ", "), store.ErrConflict)
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM mcp_connectors WHERE id = ?`, id)
		if isForeignKey(err) {
			return fmt.Errorf("in use by a virtual server: %w", store.ErrConflict)
		}
		if err != nil {
			return err
		}
		return mustAffect(res)
	})
	if err != nil {
		return fmt.Errorf("delete mcp connector %s: %w", id, err)
	}
	return nil
}

func scanConnector(r scanner) (store.MCPConnector, error) {
	var (
		c                store.MCPConnector
		spec             string
		created, updated sql.NullInt64
	)
	if err := r.Scan(&c.ID, &c.Kind, &c.Description, &spec, &c.OwnerID, &created, &c.CreatedBy, &updated); err != nil {
		return store.MCPConnector{}, err
	}
	c.Spec = json.RawMessage(spec)
	c.CreatedAt, c.UpdatedAt = fromNanos(created), fromNanos(updated)
	return c, nil
}

func validMCPServer(m store.MCPServer) error {
	switch {
	case m.ID == "":
		return fmt.Errorf("empty id: %w", store.ErrInvalid)
	case len(m.Spec) == 0 || !json.Valid(m.Spec):
		return fmt.Errorf("spec is not JSON: %w", store.ErrInvalid)
	case m.CreatedAt.IsZero() || m.UpdatedAt.IsZero():
		return fmt.Errorf("created_at and updated_at are required: %w", store.ErrInvalid)
	}
	seen := make(map[string]bool, len(m.Connectors))
	for _, c := range m.Connectors {
		if c == "" || seen[c] {
			return fmt.Errorf("connector %q empty or listed twice: %w", c, store.ErrInvalid)
		}
		seen[c] = true
	}
	return nil
}

// writeServerConnectors replaces the reference rows of a server's
// connectors; a missing connector is ErrNotFound.
func writeServerConnectors(ctx context.Context, tx *sql.Tx, m store.MCPServer) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM mcp_server_connectors WHERE server_id = ?`, m.ID); err != nil {
		return err
	}
	for _, c := range m.Connectors {
		_, err := tx.ExecContext(ctx, `INSERT INTO mcp_server_connectors (server_id, connector_id) VALUES (?, ?)`, m.ID, c)
		if isForeignKey(err) {
			return fmt.Errorf("mcp connector %s: %w", c, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// CreateMCPServer implements store.MCPStore.
func (s *Store) CreateMCPServer(ctx context.Context, m store.MCPServer) error {
	if err := validMCPServer(m); err != nil {
		return fmt.Errorf("create mcp server %s: %w", m.ID, err)
	}
	conns, err := json.Marshal(nonNil(m.Connectors))
	if err != nil {
		return fmt.Errorf("create mcp server %s: %w", m.ID, err)
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO mcp_servers (`+mcpServerColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			m.ID, m.Description, string(m.Spec), string(conns), nanos(m.CreatedAt), m.CreatedBy, nanos(m.UpdatedAt))
		if isUnique(err) {
			return fmt.Errorf("id in use: %w", store.ErrConflict)
		}
		if err != nil {
			return err
		}
		return writeServerConnectors(ctx, tx, m)
	})
	if err != nil {
		return fmt.Errorf("create mcp server %s: %w", m.ID, err)
	}
	return nil
}

// GetMCPServer implements store.MCPStore.
func (s *Store) GetMCPServer(ctx context.Context, id string) (store.MCPServer, error) {
	m, err := scanMCPServer(s.reader.QueryRowContext(ctx, `SELECT `+mcpServerColumns+` FROM mcp_servers WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.MCPServer{}, fmt.Errorf("mcp server %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.MCPServer{}, fmt.Errorf("get mcp server %s: %w", id, err)
	}
	return m, nil
}

// ListMCPServers implements store.MCPStore.
func (s *Store) ListMCPServers(ctx context.Context) ([]store.MCPServer, error) {
	rows, err := s.reader.QueryContext(ctx, `SELECT `+mcpServerColumns+` FROM mcp_servers ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list mcp servers: %w", err)
	}
	out, err := collect(rows, scanMCPServer)
	if err != nil {
		return nil, fmt.Errorf("list mcp servers: %w", err)
	}
	return out, nil
}

// UpdateMCPServer implements store.MCPStore.
func (s *Store) UpdateMCPServer(ctx context.Context, id string, fn func(*store.MCPServer) error) (store.MCPServer, error) {
	var out store.MCPServer
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		m, err := scanMCPServer(tx.QueryRowContext(ctx, `SELECT `+mcpServerColumns+` FROM mcp_servers WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if err := fn(&m); err != nil {
			return err
		}
		if m.ID != id {
			return fmt.Errorf("the update changed the id: %w", store.ErrInvalid)
		}
		if err := validMCPServer(m); err != nil {
			return err
		}
		conns, err := json.Marshal(nonNil(m.Connectors))
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE mcp_servers SET description = ?, spec = ?, connectors = ?,
				created_at = ?, created_by = ?, updated_at = ? WHERE id = ?`,
			m.Description, string(m.Spec), string(conns), nanos(m.CreatedAt), m.CreatedBy, nanos(m.UpdatedAt), id); err != nil {
			return err
		}
		if err := writeServerConnectors(ctx, tx, m); err != nil {
			return err
		}
		out = m
		return nil
	})
	if err != nil {
		return store.MCPServer{}, fmt.Errorf("update mcp server %s: %w", id, err)
	}
	return out, nil
}

// DeleteMCPServer implements store.MCPStore.
func (s *Store) DeleteMCPServer(ctx context.Context, id string) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM mcp_servers WHERE id = ?`, id)
		if err != nil {
			return err
		}
		return mustAffect(res)
	})
	if err != nil {
		return fmt.Errorf("delete mcp server %s: %w", id, err)
	}
	return nil
}

func scanMCPServer(r scanner) (store.MCPServer, error) {
	var (
		m                store.MCPServer
		spec, conns      string
		created, updated sql.NullInt64
	)
	if err := r.Scan(&m.ID, &m.Description, &spec, &conns, &created, &m.CreatedBy, &updated); err != nil {
		return store.MCPServer{}, err
	}
	if err := json.Unmarshal([]byte(conns), &m.Connectors); err != nil {
		return store.MCPServer{}, fmt.Errorf("mcp server %s: connectors: %w", m.ID, err)
	}
	if len(m.Connectors) == 0 {
		m.Connectors = nil
	}
	m.Spec = json.RawMessage(spec)
	m.CreatedAt, m.UpdatedAt = fromNanos(created), fromNanos(updated)
	return m, nil
}

// PutMCPGrant implements store.MCPStore.
func (s *Store) PutMCPGrant(ctx context.Context, g store.MCPGrant) error {
	if g.ServerID == "" || g.PrincipalID == "" || g.CreatedAt.IsZero() {
		return fmt.Errorf("put mcp grant: server, principal and created_at are required: %w", store.ErrInvalid)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO mcp_grants (server_id, principal_id, created_at, created_by)
			VALUES (?, ?, ?, ?) ON CONFLICT (server_id, principal_id) DO NOTHING`,
			g.ServerID, g.PrincipalID, nanos(g.CreatedAt), g.CreatedBy)
		if isForeignKey(err) {
			return fmt.Errorf("mcp server %s or principal %s: %w", g.ServerID, g.PrincipalID, store.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("put mcp grant %s to %s: %w", g.ServerID, g.PrincipalID, err)
	}
	return nil
}

// DeleteMCPGrant implements store.MCPStore.
func (s *Store) DeleteMCPGrant(ctx context.Context, serverID, principalID string) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM mcp_grants WHERE server_id = ? AND principal_id = ?`, serverID, principalID)
		if err != nil {
			return err
		}
		return mustAffect(res)
	})
	if err != nil {
		return fmt.Errorf("delete mcp grant %s to %s: %w", serverID, principalID, err)
	}
	return nil
}

// ListMCPGrants implements store.MCPStore.
func (s *Store) ListMCPGrants(ctx context.Context, serverID, principalID string) ([]store.MCPGrant, error) {
	q := `SELECT server_id, principal_id, created_at, created_by FROM mcp_grants WHERE 1 = 1`
	var args []any
	if serverID != "" {
		q += ` AND server_id = ?`
		args = append(args, serverID)
	}
	if principalID != "" {
		q += ` AND principal_id = ?`
		args = append(args, principalID)
	}
	rows, err := s.reader.QueryContext(ctx, q+` ORDER BY server_id, principal_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("list mcp grants: %w", err)
	}
	out, err := collect(rows, func(r scanner) (store.MCPGrant, error) {
		var (
			g       store.MCPGrant
			created sql.NullInt64
		)
		if err := r.Scan(&g.ServerID, &g.PrincipalID, &created, &g.CreatedBy); err != nil {
			return store.MCPGrant{}, err
		}
		g.CreatedAt = fromNanos(created)
		return g, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list mcp grants: %w", err)
	}
	return out, nil
}

func validPinState(state string) bool {
	return state == store.MCPToolPending || state == store.MCPToolApproved || state == store.MCPToolRejected
}

// PutToolPin implements store.MCPStore.
func (s *Store) PutToolPin(ctx context.Context, p store.MCPToolPin) (store.MCPToolPin, error) {
	switch {
	case p.Connector == "" || p.Tool == "" || p.Hash == "":
		return store.MCPToolPin{}, fmt.Errorf("put tool pin: connector, tool and hash are required: %w", store.ErrInvalid)
	case len(p.Definition) == 0 || !json.Valid(p.Definition):
		return store.MCPToolPin{}, fmt.Errorf("put tool pin %s/%s: definition is not JSON: %w", p.Connector, p.Tool, store.ErrInvalid)
	case !validPinState(p.State):
		return store.MCPToolPin{}, fmt.Errorf("put tool pin %s/%s: state %q: %w", p.Connector, p.Tool, p.State, store.ErrInvalid)
	case p.FirstSeen.IsZero():
		return store.MCPToolPin{}, fmt.Errorf("put tool pin %s/%s: first_seen is required: %w", p.Connector, p.Tool, store.ErrInvalid)
	}
	var out store.MCPToolPin
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO mcp_tool_pins (`+mcpPinColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (connector_id, tool, hash) DO NOTHING`,
			p.Connector, p.Tool, p.Hash, string(p.Definition), p.State, nanos(p.FirstSeen), p.DecidedBy, nanos(p.DecidedAt))
		if isForeignKey(err) {
			return fmt.Errorf("mcp connector %s: %w", p.Connector, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		out, err = scanPin(tx.QueryRowContext(ctx, `SELECT `+mcpPinColumns+` FROM mcp_tool_pins
			WHERE connector_id = ? AND tool = ? AND hash = ?`, p.Connector, p.Tool, p.Hash))
		return err
	})
	if err != nil {
		return store.MCPToolPin{}, fmt.Errorf("put tool pin %s/%s: %w", p.Connector, p.Tool, err)
	}
	return out, nil
}

// ListToolPins implements store.MCPStore.
func (s *Store) ListToolPins(ctx context.Context, f store.MCPToolPinFilter) ([]store.MCPToolPin, error) {
	q := `SELECT ` + mcpPinColumns + ` FROM mcp_tool_pins WHERE 1 = 1`
	var args []any
	if f.Connector != "" {
		q += ` AND connector_id = ?`
		args = append(args, f.Connector)
	}
	if f.Tool != "" {
		q += ` AND tool = ?`
		args = append(args, f.Tool)
	}
	if len(f.States) > 0 {
		q += ` AND state IN (?` + strings.Repeat(`, ?`, len(f.States)-1) + `)`
		for _, st := range f.States {
			args = append(args, st)
		}
	}
	rows, err := s.reader.QueryContext(ctx, q+` ORDER BY connector_id, tool, first_seen, hash`, args...)
	if err != nil {
		return nil, fmt.Errorf("list tool pins: %w", err)
	}
	out, err := collect(rows, scanPin)
	if err != nil {
		return nil, fmt.Errorf("list tool pins: %w", err)
	}
	return out, nil
}

// DecideToolPin implements store.MCPStore.
func (s *Store) DecideToolPin(ctx context.Context, connector, tool, hash, state, by string, at time.Time) (store.MCPToolPin, error) {
	if state != store.MCPToolApproved && state != store.MCPToolRejected {
		return store.MCPToolPin{}, fmt.Errorf("decide tool pin %s/%s: state %q: want approved or rejected: %w",
			connector, tool, state, store.ErrInvalid)
	}
	if at.IsZero() {
		at = time.Now()
	}
	var out store.MCPToolPin
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE mcp_tool_pins SET state = ?, decided_by = ?, decided_at = ?
			WHERE connector_id = ? AND tool = ? AND hash = ?`, state, by, nanos(at), connector, tool, hash)
		if err != nil {
			return err
		}
		if err := mustAffect(res); err != nil {
			return err
		}
		out, err = scanPin(tx.QueryRowContext(ctx, `SELECT `+mcpPinColumns+` FROM mcp_tool_pins
			WHERE connector_id = ? AND tool = ? AND hash = ?`, connector, tool, hash))
		return err
	})
	if err != nil {
		return store.MCPToolPin{}, fmt.Errorf("decide tool pin %s/%s %s: %w", connector, tool, hash, err)
	}
	return out, nil
}

func scanPin(r scanner) (store.MCPToolPin, error) {
	var (
		p             store.MCPToolPin
		def           string
		seen, decided sql.NullInt64
	)
	if err := r.Scan(&p.Connector, &p.Tool, &p.Hash, &def, &p.State, &seen, &p.DecidedBy, &decided); err != nil {
		return store.MCPToolPin{}, err
	}
	p.Definition = json.RawMessage(def)
	p.FirstSeen, p.DecidedAt = fromNanos(seen), fromNanos(decided)
	return p, nil
}

// PutMCPCredential implements store.MCPStore.
func (s *Store) PutMCPCredential(ctx context.Context, c store.MCPCredential) error {
	switch {
	case c.Connector == "" || c.SecretID == "" || c.Kind == "":
		return fmt.Errorf("put mcp credential: connector, kind and secret are required: %w", store.ErrInvalid)
	case c.CreatedAt.IsZero() || c.UpdatedAt.IsZero():
		return fmt.Errorf("put mcp credential %s: created_at and updated_at are required: %w", c.Connector, store.ErrInvalid)
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if c.PrincipalID != "" {
			var one int
			err := tx.QueryRowContext(ctx, `SELECT 1 FROM principals WHERE id = ?`, c.PrincipalID).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("principal %s: %w", c.PrincipalID, store.ErrNotFound)
			}
			if err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO mcp_credentials (`+mcpCredentialColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (connector_id, principal_id) DO UPDATE SET kind = excluded.kind, secret_id = excluded.secret_id,
				created_at = excluded.created_at, created_by = excluded.created_by, updated_at = excluded.updated_at`,
			c.Connector, c.PrincipalID, c.Kind, c.SecretID, nanos(c.CreatedAt), c.CreatedBy, nanos(c.UpdatedAt))
		if isForeignKey(err) {
			return fmt.Errorf("mcp connector %s: %w", c.Connector, store.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("put mcp credential %s for %q: %w", c.Connector, c.PrincipalID, err)
	}
	return nil
}

// GetMCPCredential implements store.MCPStore.
func (s *Store) GetMCPCredential(ctx context.Context, connector, principalID string) (store.MCPCredential, error) {
	var (
		c                store.MCPCredential
		created, updated sql.NullInt64
	)
	err := s.reader.QueryRowContext(ctx, `SELECT `+mcpCredentialColumns+` FROM mcp_credentials
		WHERE connector_id = ? AND principal_id = ?`, connector, principalID).
		Scan(&c.Connector, &c.PrincipalID, &c.Kind, &c.SecretID, &created, &c.CreatedBy, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return store.MCPCredential{}, fmt.Errorf("mcp credential %s for %q: %w", connector, principalID, store.ErrNotFound)
	}
	if err != nil {
		return store.MCPCredential{}, fmt.Errorf("get mcp credential %s for %q: %w", connector, principalID, err)
	}
	c.CreatedAt, c.UpdatedAt = fromNanos(created), fromNanos(updated)
	return c, nil
}

// DeleteMCPCredential implements store.MCPStore.
func (s *Store) DeleteMCPCredential(ctx context.Context, connector, principalID string) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM mcp_credentials WHERE connector_id = ? AND principal_id = ?`,
			connector, principalID)
		if err != nil {
			return err
		}
		return mustAffect(res)
	})
	if err != nil {
		return fmt.Errorf("delete mcp credential %s for %q: %w", connector, principalID, err)
	}
	return nil
}

// mustAffect turns a write that matched no row into ErrNotFound.
func mustAffect(res sql.Result) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return store.ErrNotFound
	}
	return nil
}

// collect scans every row and closes rows.
func collect[T any](rows *sql.Rows, scan func(scanner) (T, error)) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
