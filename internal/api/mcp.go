package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/mcpgw"
	"github.com/warden-sandbox/warden/internal/store"
)

// The MCP gateway's configuration (docs/mcp.md): connectors (upstream MCP
// servers), virtual servers that bundle their tools, grants of virtual
// servers to principals, the pinned tool definitions an admin approves,
// and credential bindings. mcp:admin (human-only) changes all of it and
// every change is the governed action mcp.admin; a key with mcp:use sees
// the servers granted to its principal and binds its own credentials. The
// gateway itself (internal/mcpgw) serves the virtual servers at
// /mcp/v/{id}. Spec fields are validated by internal/mcpgw.

// MCPServerPath is the path of a virtual server's streamable-HTTP
// endpoint on the API listener.
func MCPServerPath(id string) string { return "/mcp/v/" + id }

// mcpChanged tells the gateway of a change (connector: the connector
// whose sessions must close, "" for none).
func (s *Server) mcpChanged(connector string) {
	h := s.cfg.MCP
	if h == nil {
		return
	}
	if connector != "" {
		h.ForgetConnector(connector)
	}
	h.Invalidate()
}

// mcpConnectorView is a connector as the API shows it.
type mcpConnectorView struct {
	ID          string          `json:"id"`
	Kind        string          `json:"kind"`
	Description string          `json:"description"`
	Spec        json.RawMessage `json:"spec"`
	OwnerID     string          `json:"owner_id"`
	CreatedAt   time.Time       `json:"created_at"`
	CreatedBy   string          `json:"created_by"`
	UpdatedAt   time.Time       `json:"updated_at"`
}

func connectorView(c store.MCPConnector) mcpConnectorView {
	return mcpConnectorView{ID: c.ID, Kind: c.Kind, Description: c.Description, Spec: c.Spec, OwnerID: c.OwnerID,
		CreatedAt: c.CreatedAt, CreatedBy: c.CreatedBy, UpdatedAt: c.UpdatedAt}
}

// mcpServerView is a virtual server as the API shows it.
type mcpServerView struct {
	ID          string          `json:"id"`
	Description string          `json:"description"`
	Spec        json.RawMessage `json:"spec"`
	Connectors  []string        `json:"connectors"`
	Path        string          `json:"path"`
	CreatedAt   time.Time       `json:"created_at"`
	CreatedBy   string          `json:"created_by"`
	UpdatedAt   time.Time       `json:"updated_at"`
}

func serverView(m store.MCPServer) mcpServerView {
	conns := m.Connectors
	if conns == nil {
		conns = []string{}
	}
	return mcpServerView{ID: m.ID, Description: m.Description, Spec: m.Spec, Connectors: conns, Path: MCPServerPath(m.ID),
		CreatedAt: m.CreatedAt, CreatedBy: m.CreatedBy, UpdatedAt: m.UpdatedAt}
}

type mcpGrantView struct {
	ServerID    string    `json:"server_id"`
	PrincipalID string    `json:"principal_id"`
	CreatedAt   time.Time `json:"created_at"`
	CreatedBy   string    `json:"created_by"`
}

type mcpToolView struct {
	Connector  string          `json:"connector"`
	Tool       string          `json:"tool"`
	Hash       string          `json:"hash"`
	Definition json.RawMessage `json:"definition"`
	State      string          `json:"state"`
	FirstSeen  time.Time       `json:"first_seen"`
	DecidedBy  string          `json:"decided_by,omitempty"`
	DecidedAt  *time.Time      `json:"decided_at,omitempty"`
}

func toolView(p store.MCPToolPin) mcpToolView {
	v := mcpToolView{Connector: p.Connector, Tool: p.Tool, Hash: p.Hash, Definition: p.Definition, State: p.State,
		FirstSeen: p.FirstSeen, DecidedBy: p.DecidedBy}
	if !p.DecidedAt.IsZero() {
		t := p.DecidedAt
		v.DecidedAt = &t
	}
	return v
}

type mcpCredentialView struct {
	Connector   string    `json:"connector"`
	PrincipalID string    `json:"principal_id"`
	Kind        string    `json:"kind"`
	SecretID    string    `json:"secret_id"`
	CreatedAt   time.Time `json:"created_at"`
	CreatedBy   string    `json:"created_by"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// mcpConnectorBody is a connector as clients write it.
type mcpConnectorBody struct {
	ID          string          `json:"id"`
	Kind        string          `json:"kind"`
	Description string          `json:"description"`
	Spec        json.RawMessage `json:"spec"`
}

// mcpServerBody is a virtual server as clients write it.
type mcpServerBody struct {
	ID          string          `json:"id"`
	Description string          `json:"description"`
	Spec        json.RawMessage `json:"spec"`
}

const maxMCPDescription = 4096

// checkConnector validates a connector body and returns the URL of a
// remote one (for the governed action's attributes).
func checkConnector(q mcpConnectorBody) (string, error) {
	if !mcpgw.ValidConnectorID(q.ID) {
		return "", apierr.Validation("id %q: 1-63 of a-z0-9- starting and ending with a letter or digit", truncate(q.ID, 80))
	}
	if len(q.Description) > maxMCPDescription {
		return "", apierr.Validation("description: at most %d bytes", maxMCPDescription)
	}
	spec, err := mcpgw.ParseConnectorSpec(q.Kind, q.Spec)
	if err != nil {
		return "", apierr.Validation("%v", err)
	}
	if rs, ok := spec.(*mcpgw.RemoteSpec); ok {
		return rs.URL, nil
	}
	return "", nil
}

// normSpec is the spec to store: "{}" for none.
func normSpec(raw json.RawMessage) json.RawMessage {
	if len(strings.TrimSpace(string(raw))) == 0 || string(raw) == "null" {
		return json.RawMessage("{}")
	}
	return raw
}

func mcpConnectorErr(id string, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFoundf("mcp connector %s not found", truncate(id, 80))
	case errors.Is(err, store.ErrConflict):
		return apierr.Conflict("mcp connector %s: %s", truncate(id, 80), conflictReason(err))
	}
	return err
}

// conflictReason is the store's explanation of a conflict, without the
// "conflict" sentinel's own text.
func conflictReason(err error) string {
	msg := err.Error()
	if _, after, ok := strings.Cut(msg, ": "); ok {
		msg = after
	}
	return strings.TrimSuffix(msg, ": conflict")
}

func (s *Server) createConnector(w http.ResponseWriter, r *http.Request) error {
	var q mcpConnectorBody
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	st := stateOf(r)
	st.target = q.ID
	q.Spec = normSpec(q.Spec)
	u, err := checkConnector(q)
	if err != nil {
		return err
	}
	st.detail["kind"] = q.Kind
	if err := s.decide(r, &govern.Action{MCPAdmin: &govern.MCPAdmin{Op: "create", Object: "connector", ID: q.ID,
		Connector: q.ID, ConnectorKind: q.Kind, URL: u}}); err != nil {
		return err
	}
	now := time.Now().UTC()
	c := store.MCPConnector{ID: q.ID, Kind: q.Kind, Description: q.Description, Spec: q.Spec, OwnerID: st.principal,
		CreatedAt: now, CreatedBy: st.principal, UpdatedAt: now}
	if err := s.st.CreateConnector(r.Context(), c); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return apierr.Conflict("mcp connector %s exists", q.ID)
		}
		return err
	}
	s.mcpChanged("")
	return writeJSON(w, http.StatusCreated, connectorView(c))
}

func (s *Server) listConnectors(w http.ResponseWriter, r *http.Request) error {
	cs, err := s.st.ListConnectors(r.Context())
	if err != nil {
		return err
	}
	out := make([]mcpConnectorView, 0, len(cs))
	for _, c := range cs {
		out = append(out, connectorView(c))
	}
	return writeJSON(w, http.StatusOK, map[string]any{"connectors": out})
}

func (s *Server) getConnector(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	c, err := s.st.GetConnector(r.Context(), id)
	if err != nil {
		return mcpConnectorErr(id, err)
	}
	return writeJSON(w, http.StatusOK, connectorView(c))
}

func (s *Server) updateConnector(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	var q mcpConnectorBody
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	if q.ID != "" && q.ID != id {
		return apierr.Validation("id %q in the body differs from the path's %q: a connector's id cannot change",
			truncate(q.ID, 80), truncate(id, 80))
	}
	cur, err := s.st.GetConnector(r.Context(), id)
	if err != nil {
		return mcpConnectorErr(id, err)
	}
	if q.Kind == "" {
		q.Kind = cur.Kind
	} else if q.Kind != cur.Kind {
		return apierr.Validation("kind %q differs from the connector's %q: a connector's kind cannot change",
			truncate(q.Kind, 32), cur.Kind)
	}
	q.ID = id
	q.Spec = normSpec(q.Spec)
	u, err := checkConnector(q)
	if err != nil {
		return err
	}
	if err := s.decide(r, &govern.Action{MCPAdmin: &govern.MCPAdmin{Op: "update", Object: "connector", ID: id,
		Connector: id, ConnectorKind: q.Kind, URL: u}}); err != nil {
		return err
	}
	c, err := s.st.UpdateConnector(r.Context(), id, func(c *store.MCPConnector) error {
		if c.Kind != q.Kind {
			return fmt.Errorf("its kind changed meanwhile: %w", store.ErrConflict)
		}
		c.Description, c.Spec, c.UpdatedAt = q.Description, q.Spec, time.Now().UTC()
		return nil
	})
	if err != nil {
		return mcpConnectorErr(id, err)
	}
	s.mcpChanged(id)
	return writeJSON(w, http.StatusOK, connectorView(c))
}

func (s *Server) deleteConnector(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := s.decide(r, &govern.Action{MCPAdmin: &govern.MCPAdmin{Op: "delete", Object: "connector", ID: id, Connector: id}}); err != nil {
		return err
	}
	if err := s.st.DeleteConnector(r.Context(), id); err != nil {
		return mcpConnectorErr(id, err)
	}
	s.mcpChanged(id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// checkServer validates a virtual server body and returns its connectors.
func checkServer(q mcpServerBody) ([]string, error) {
	if !mcpgw.ValidConnectorID(q.ID) {
		return nil, apierr.Validation("id %q: 1-63 of a-z0-9- starting and ending with a letter or digit", truncate(q.ID, 80))
	}
	if len(q.Description) > maxMCPDescription {
		return nil, apierr.Validation("description: at most %d bytes", maxMCPDescription)
	}
	spec, err := mcpgw.ParseServerSpec(q.Spec)
	if err != nil {
		return nil, apierr.Validation("%v", err)
	}
	conns := make([]string, 0, len(spec.Connectors))
	for _, c := range spec.Connectors {
		conns = append(conns, c.Connector)
	}
	return conns, nil
}

func mcpServerErr(id string, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFoundf("mcp server %s not found", truncate(id, 80))
	case errors.Is(err, store.ErrConflict):
		return apierr.Conflict("mcp server %s: %s", truncate(id, 80), conflictReason(err))
	}
	return err
}

// missingConnector answers a server write whose spec names a connector
// that does not exist.
func (s *Server) missingConnector(r *http.Request, conns []string) error {
	for _, c := range conns {
		if _, err := s.st.GetConnector(r.Context(), c); errors.Is(err, store.ErrNotFound) {
			return apierr.Validation("spec: connector %q does not exist", c)
		}
	}
	return nil
}

func (s *Server) createMCPServer(w http.ResponseWriter, r *http.Request) error {
	var q mcpServerBody
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	st := stateOf(r)
	st.target = q.ID
	conns, err := checkServer(q)
	if err != nil {
		return err
	}
	st.detail["connectors"] = conns
	if err := s.decide(r, &govern.Action{MCPAdmin: &govern.MCPAdmin{Op: "create", Object: "server", ID: q.ID,
		Connectors: conns}}); err != nil {
		return err
	}
	now := time.Now().UTC()
	m := store.MCPServer{ID: q.ID, Description: q.Description, Spec: q.Spec, Connectors: conns,
		CreatedAt: now, CreatedBy: st.principal, UpdatedAt: now}
	if err := s.st.CreateMCPServer(r.Context(), m); err != nil {
		switch {
		case errors.Is(err, store.ErrConflict):
			return apierr.Conflict("mcp server %s exists", q.ID)
		case errors.Is(err, store.ErrNotFound):
			if e := s.missingConnector(r, conns); e != nil {
				return e
			}
		}
		return err
	}
	s.mcpChanged("")
	return writeJSON(w, http.StatusCreated, serverView(m))
}

// granted reports whether the caller's principal was granted server id.
func (s *Server) granted(r *http.Request, id string) (bool, error) {
	gs, err := s.st.ListMCPGrants(r.Context(), id, stateOf(r).principal)
	return len(gs) > 0, err
}

func (s *Server) listMCPServers(w http.ResponseWriter, r *http.Request) error {
	st := stateOf(r)
	ms, err := s.st.ListMCPServers(r.Context())
	if err != nil {
		return err
	}
	var mine map[string]bool
	if st.ownOnly {
		// mcp:use without mcp:admin: the servers granted to the caller.
		gs, err := s.st.ListMCPGrants(r.Context(), "", st.principal)
		if err != nil {
			return err
		}
		mine = make(map[string]bool, len(gs))
		for _, g := range gs {
			mine[g.ServerID] = true
		}
	}
	out := make([]mcpServerView, 0, len(ms))
	for _, m := range ms {
		if mine == nil || mine[m.ID] {
			out = append(out, serverView(m))
		}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"servers": out})
}

func (s *Server) getMCPServer(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if stateOf(r).ownOnly {
		ok, err := s.granted(r, id)
		if err != nil {
			return err
		}
		if !ok {
			return deny(fmt.Errorf("mcp server %s is not granted to the caller: %w", truncate(id, 80),
				apierr.NotFound("mcp server %s not found", truncate(id, 80))))
		}
	}
	m, err := s.st.GetMCPServer(r.Context(), id)
	if err != nil {
		return mcpServerErr(id, err)
	}
	return writeJSON(w, http.StatusOK, serverView(m))
}

func (s *Server) updateMCPServer(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	var q mcpServerBody
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	if q.ID != "" && q.ID != id {
		return apierr.Validation("id %q in the body differs from the path's %q: a server's id cannot change",
			truncate(q.ID, 80), truncate(id, 80))
	}
	q.ID = id
	conns, err := checkServer(q)
	if err != nil {
		return err
	}
	stateOf(r).detail["connectors"] = conns
	if err := s.decide(r, &govern.Action{MCPAdmin: &govern.MCPAdmin{Op: "update", Object: "server", ID: id,
		Connectors: conns}}); err != nil {
		return err
	}
	m, err := s.st.UpdateMCPServer(r.Context(), id, func(m *store.MCPServer) error {
		m.Description, m.Spec, m.Connectors, m.UpdatedAt = q.Description, q.Spec, conns, time.Now().UTC()
		return nil
	})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			if _, gerr := s.st.GetMCPServer(r.Context(), id); gerr == nil {
				if e := s.missingConnector(r, conns); e != nil {
					return e
				}
			}
		}
		return mcpServerErr(id, err)
	}
	s.mcpChanged("")
	return writeJSON(w, http.StatusOK, serverView(m))
}

func (s *Server) deleteMCPServer(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := s.decide(r, &govern.Action{MCPAdmin: &govern.MCPAdmin{Op: "delete", Object: "server", ID: id}}); err != nil {
		return err
	}
	if err := s.st.DeleteMCPServer(r.Context(), id); err != nil {
		return mcpServerErr(id, err)
	}
	s.mcpChanged("")
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) putMCPGrant(w http.ResponseWriter, r *http.Request) error {
	id, pid := r.PathValue("id"), r.PathValue("principal")
	st := stateOf(r)
	st.detail["principal_id"] = pid
	if err := s.decide(r, &govern.Action{MCPAdmin: &govern.MCPAdmin{Op: "grant", Object: "server", ID: id,
		PrincipalID: pid}}); err != nil {
		return err
	}
	if _, err := s.st.GetMCPServer(r.Context(), id); err != nil {
		return mcpServerErr(id, err)
	}
	if _, err := s.st.GetPrincipal(r.Context(), pid); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return notFoundf("principal %s not found", truncate(pid, 80))
		}
		return err
	}
	if err := s.st.PutMCPGrant(r.Context(), store.MCPGrant{ServerID: id, PrincipalID: pid,
		CreatedAt: time.Now().UTC(), CreatedBy: st.principal}); err != nil {
		return mcpServerErr(id, err)
	}
	s.mcpChanged("")
	gs, err := s.st.ListMCPGrants(r.Context(), id, pid)
	if err != nil {
		return err
	}
	if len(gs) != 1 {
		return notFoundf("mcp server %s not found", truncate(id, 80)) // deleted meanwhile
	}
	return writeJSON(w, http.StatusOK, mcpGrantView(gs[0]))
}

func (s *Server) deleteMCPGrant(w http.ResponseWriter, r *http.Request) error {
	id, pid := r.PathValue("id"), r.PathValue("principal")
	stateOf(r).detail["principal_id"] = pid
	if err := s.decide(r, &govern.Action{MCPAdmin: &govern.MCPAdmin{Op: "revoke", Object: "server", ID: id,
		PrincipalID: pid}}); err != nil {
		return err
	}
	if err := s.st.DeleteMCPGrant(r.Context(), id, pid); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return notFoundf("mcp server %s has no grant to %s", truncate(id, 80), truncate(pid, 80))
		}
		return err
	}
	s.mcpChanged("")
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) listMCPGrants(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if _, err := s.st.GetMCPServer(r.Context(), id); err != nil {
		return mcpServerErr(id, err)
	}
	gs, err := s.st.ListMCPGrants(r.Context(), id, "")
	if err != nil {
		return err
	}
	out := make([]mcpGrantView, 0, len(gs))
	for _, g := range gs {
		out = append(out, mcpGrantView(g))
	}
	return writeJSON(w, http.StatusOK, map[string]any{"grants": out})
}

var mcpToolStates = []string{store.MCPToolPending, store.MCPToolApproved, store.MCPToolRejected}

func (s *Server) listMCPTools(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := store.MCPToolPinFilter{Connector: q.Get("connector"), Tool: q.Get("tool")}
	for _, v := range q["state"] {
		for st := range strings.SplitSeq(v, ",") {
			if !slices.Contains(mcpToolStates, st) {
				return apierr.BadRequest("query parameter state: %q is not pending, approved or rejected", truncate(st, 32))
			}
			if !slices.Contains(f.States, st) {
				f.States = append(f.States, st)
			}
		}
	}
	if f.Connector != "" {
		if _, err := s.st.GetConnector(r.Context(), f.Connector); err != nil {
			return mcpConnectorErr(f.Connector, err)
		}
	}
	ps, err := s.st.ListToolPins(r.Context(), f)
	if err != nil {
		return err
	}
	out := make([]mcpToolView, 0, len(ps))
	for _, p := range ps {
		out = append(out, toolView(p))
	}
	return writeJSON(w, http.StatusOK, map[string]any{"tools": out})
}

func (s *Server) approveMCPTool(w http.ResponseWriter, r *http.Request) error {
	return s.decideMCPTool(w, r, store.MCPToolApproved, "approve")
}

func (s *Server) rejectMCPTool(w http.ResponseWriter, r *http.Request) error {
	return s.decideMCPTool(w, r, store.MCPToolRejected, "reject")
}

func (s *Server) decideMCPTool(w http.ResponseWriter, r *http.Request, state, op string) error {
	conn, tool, hash := r.PathValue("connector"), r.PathValue("tool"), r.PathValue("hash")
	st := stateOf(r)
	st.target = conn + "/" + tool
	st.detail["hash"] = hash
	if err := s.decide(r, &govern.Action{MCPAdmin: &govern.MCPAdmin{Op: op, Object: "tool", ID: conn + "/" + tool + "/" + hash,
		Connector: conn, Tool: tool}}); err != nil {
		return err
	}
	p, err := s.st.DecideToolPin(r.Context(), conn, tool, hash, state, st.principal, time.Now().UTC())
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return notFoundf("tool %s of mcp connector %s has no definition %s", truncate(tool, 128), truncate(conn, 80), truncate(hash, 64))
		}
		return err
	}
	s.mcpChanged("")
	return writeJSON(w, http.StatusOK, toolView(p))
}

// mcpCredentialBody binds a secret to a connector.
type mcpCredentialBody struct {
	// SecretID is a secret of the caller's (secrets store).
	SecretID string `json:"secret_id"`
	// Kind is header (default) or oauth.
	Kind string `json:"kind"`
	// PrincipalID binds it for another principal (mcp:admin); Shared
	// binds it as the connector's shared service credential (mcp:admin).
	PrincipalID string `json:"principal_id"`
	Shared      bool   `json:"shared"`
}

// credentialFor is the principal a credential call is about ("" for the
// shared credential): another principal or the shared one needs
// mcp:admin.
func (s *Server) credentialFor(r *http.Request, principal string, shared bool) (string, error) {
	st := stateOf(r)
	switch {
	case shared && principal != "":
		return "", apierr.Validation("a credential is shared or a principal's, not both")
	case shared:
		return "", s.requireScope(r, auth.ScopeMCPAdmin)
	case principal == "" || principal == st.principal:
		return st.principal, nil
	}
	return principal, s.requireScope(r, auth.ScopeMCPAdmin)
}

func (s *Server) putMCPCredential(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	var q mcpCredentialBody
	if err := decodeJSON(r, &q, true); err != nil {
		return err
	}
	st := stateOf(r)
	pid, err := s.credentialFor(r, q.PrincipalID, q.Shared)
	if err != nil {
		return err
	}
	if q.Kind == "" {
		q.Kind = "header"
	}
	if q.Kind != "header" && q.Kind != "oauth" {
		return apierr.Validation("kind %q: want header or oauth", truncate(q.Kind, 32))
	}
	if q.SecretID == "" {
		return apierr.Validation("secret_id is required")
	}
	v, err := s.vault()
	if err != nil {
		return err
	}
	if _, err := s.secretOwned(r, v, q.SecretID); err != nil {
		return err
	}
	st.target = id
	st.detail["principal_id"] = pid
	st.detail["secret_id"] = q.SecretID
	if err := s.decide(r, &govern.Action{MCPAdmin: &govern.MCPAdmin{Op: "credential_put", Object: "credential", ID: id,
		Connector: id, PrincipalID: pid}}); err != nil {
		return err
	}
	if _, err := s.st.GetConnector(r.Context(), id); err != nil {
		return mcpConnectorErr(id, err)
	}
	now := time.Now().UTC()
	c := store.MCPCredential{Connector: id, PrincipalID: pid, Kind: q.Kind, SecretID: q.SecretID,
		CreatedAt: now, CreatedBy: st.principal, UpdatedAt: now}
	if old, err := s.st.GetMCPCredential(r.Context(), id, pid); err == nil {
		c.CreatedAt, c.CreatedBy = old.CreatedAt, old.CreatedBy
	}
	if err := s.st.PutMCPCredential(r.Context(), c); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return notFoundf("mcp connector %s or principal %s not found", truncate(id, 80), truncate(pid, 80))
		}
		return err
	}
	s.mcpChanged(id)
	return writeJSON(w, http.StatusOK, mcpCredentialView(c))
}

func (s *Server) deleteMCPCredential(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	q := r.URL.Query()
	shared := false
	switch v := q.Get("shared"); v {
	case "", "false":
	case "true":
		shared = true
	default:
		return apierr.BadRequest("query parameter shared: want true or false")
	}
	pid, err := s.credentialFor(r, q.Get("principal"), shared)
	if err != nil {
		return err
	}
	stateOf(r).detail["principal_id"] = pid
	if err := s.decide(r, &govern.Action{MCPAdmin: &govern.MCPAdmin{Op: "credential_delete", Object: "credential", ID: id,
		Connector: id, PrincipalID: pid}}); err != nil {
		return err
	}
	if err := s.st.DeleteMCPCredential(r.Context(), id, pid); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return notFoundf("mcp connector %s has no credential for %q", truncate(id, 80), truncate(pid, 80))
		}
		return err
	}
	s.mcpChanged(id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}
