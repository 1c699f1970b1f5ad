package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/secrets"
	"github.com/warden-sandbox/warden/internal/store"
	warden "github.com/warden-sandbox/warden/sdk/go"
)

// mcpConformance is the spec-checking harness of spec_conformance_test.go
// on a server of the test stack with a secret store (credentials need one).
func mcpConformance(t *testing.T, hooks MCPHooks) *conformance {
	t.Helper()
	v, err := secrets.New(bytes.Repeat([]byte{9}, secrets.KeySize), &secrets.MemStore{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := env.srv.cfg
	cfg.Metrics = nil
	cfg.Secrets = v
	cfg.MCP = hooks
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := newConformance(t)
	c.hs.Close()
	h := srv.Handler()
	c.hs = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pattern := c.routes.Handler(r)
		rec := &recorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		c.verify(exchange{method: r.Method, path: r.URL.Path, pattern: pattern, status: rec.status, header: w.Header(), body: rec.body.Bytes()})
	}))
	t.Cleanup(c.hs.Close)
	return c
}

// mcpHookLog records what the API tells the gateway.
type mcpHookLog struct {
	mu          sync.Mutex
	invalidated int
	forgot      []string
}

func (h *mcpHookLog) Invalidate() { h.mu.Lock(); h.invalidated++; h.mu.Unlock() }

func (h *mcpHookLog) ForgetConnector(id string) {
	h.mu.Lock()
	h.forgot = append(h.forgot, id)
	h.mu.Unlock()
}

func (h *mcpHookLog) counts() (int, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.invalidated, slices.Clone(h.forgot)
}

func mcpDecode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

// TestMCPAdminAPI drives /v1/mcp through the real stack, every response
// checked against the spec: connectors, virtual servers, grants, what a
// mcp:use key sees, tool approvals and credential bindings, with the
// refusals each must give.
func TestMCPAdminAPI(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	hooks := &mcpHookLog{}
	c := mcpConformance(t, hooks)

	// A human with mcp:admin alone, and an agent with mcp:use (and its own
	// secrets).
	human, err := env.admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: warden.KindUser, Name: "mcp-admin-" + uniq()})
	if err != nil {
		t.Fatal(err)
	}
	hk, err := env.admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: human.ID, Name: "mcp", Scopes: []string{"mcp:admin", "secrets:write"}})
	if err != nil {
		t.Fatal(err)
	}
	admin := hk.Key
	agentID, agent, err := newAgent(ctx, "mcp-agent-"+uniq(), []string{"mcp:use", "secrets:write"})
	if err != nil {
		t.Fatal(err)
	}
	// mcp:admin is human-only: never on an agent's key.
	c.want(403, "POST", "/v1/keys", env.adminKey, map[string]any{"principal_id": agentID, "scopes": []string{"mcp:admin"}})

	// Connectors.
	gh := "gh-" + uniq()
	before, _ := hooks.counts()
	c.want(201, "POST", "/v1/mcp/connectors", admin, map[string]any{"id": gh, "kind": "remote", "description": "GitHub",
		"spec": map[string]any{"url": "https://mcp.example.com/mcp", "auth": map[string]any{"header": "Authorization"}}})
	c.want(409, "POST", "/v1/mcp/connectors", admin, map[string]any{"id": gh, "kind": "builtin"})
	c.want(422, "POST", "/v1/mcp/connectors", admin, map[string]any{"id": "Bad_ID", "kind": "builtin"})
	c.want(422, "POST", "/v1/mcp/connectors", admin, map[string]any{"id": "x-" + uniq(), "kind": "remote", "spec": map[string]any{}})
	c.want(422, "POST", "/v1/mcp/connectors", admin, map[string]any{"id": "x-" + uniq(), "kind": "ftp"})
	c.want(422, "POST", "/v1/mcp/connectors", admin, map[string]any{"id": "x-" + uniq(), "kind": "builtin", "spec": map[string]any{"nope": 1}})
	c.want(400, "POST", "/v1/mcp/connectors", admin, map[string]any{"id": "x-" + uniq(), "kind": "builtin", "surprise": true})
	tools := "tools-" + uniq()
	c.want(201, "POST", "/v1/mcp/connectors", admin, map[string]any{"id": tools, "kind": "builtin"})

	list := mcpDecode[struct{ Connectors []mcpConnectorView }](t, c.want(200, "GET", "/v1/mcp/connectors", admin, nil))
	if !slices.ContainsFunc(list.Connectors, func(v mcpConnectorView) bool { return v.ID == gh && v.OwnerID == human.ID }) {
		t.Errorf("list: %+v lacks %s owned by %s", list.Connectors, gh, human.ID)
	}
	got := mcpDecode[mcpConnectorView](t, c.want(200, "GET", "/v1/mcp/connectors/"+gh, admin, nil))
	if got.Kind != "remote" || got.Description != "GitHub" {
		t.Errorf("get: %+v", got)
	}
	c.want(404, "GET", "/v1/mcp/connectors/nope-"+uniq(), admin, nil)
	up := mcpDecode[mcpConnectorView](t, c.want(200, "PUT", "/v1/mcp/connectors/"+gh, admin, map[string]any{
		"description": "GitHub (new)", "spec": map[string]any{"url": "https://mcp2.example.com/mcp"}}))
	if up.Description != "GitHub (new)" || !bytes.Contains(up.Spec, []byte("mcp2.example.com")) || up.Kind != "remote" {
		t.Errorf("update: %+v", up)
	}
	c.want(422, "PUT", "/v1/mcp/connectors/"+gh, admin, map[string]any{"kind": "hosted", "spec": map[string]any{"command": []string{"x"}}})
	c.want(422, "PUT", "/v1/mcp/connectors/"+gh, admin, map[string]any{"id": "other", "spec": map[string]any{"url": "https://a.example.com"}})
	c.want(404, "PUT", "/v1/mcp/connectors/nope-"+uniq(), admin, map[string]any{"spec": map[string]any{}})
	// The gateway was told: two creations and an update (which closes the
	// connector's sessions); refusals tell it nothing.
	if n, forgot := hooks.counts(); n-before != 3 || !slices.Equal(forgot, []string{gh}) {
		t.Errorf("gateway told %d times (want 3), forgot %v (want [%s])", n-before, forgot, gh)
	}

	// Virtual servers.
	dev, other := "dev-"+uniq(), "other-"+uniq()
	srv := mcpDecode[mcpServerView](t, c.want(201, "POST", "/v1/mcp/servers", admin, map[string]any{"id": dev, "description": "dev tools",
		"spec": map[string]any{"connectors": []map[string]any{{"connector": gh}, {"connector": tools, "preset": "read-only"}}}}))
	if srv.Path != "/mcp/v/"+dev || !slices.Equal(srv.Connectors, []string{gh, tools}) {
		t.Errorf("create server: %+v", srv)
	}
	c.want(201, "POST", "/v1/mcp/servers", admin, map[string]any{"id": other,
		"spec": map[string]any{"connectors": []map[string]any{{"connector": tools}}}})
	c.want(409, "POST", "/v1/mcp/servers", admin, map[string]any{"id": dev, "spec": map[string]any{"connectors": []map[string]any{{"connector": gh}}}})
	c.want(422, "POST", "/v1/mcp/servers", admin, map[string]any{"id": "s-" + uniq(),
		"spec": map[string]any{"connectors": []map[string]any{{"connector": "missing-" + uniq()}}}})
	c.want(422, "POST", "/v1/mcp/servers", admin, map[string]any{"id": "s-" + uniq(), "spec": map[string]any{"connectors": []any{}}})
	// A connector a server uses cannot go.
	c.want(409, "DELETE", "/v1/mcp/connectors/"+gh, admin, nil)
	upd := mcpDecode[mcpServerView](t, c.want(200, "PUT", "/v1/mcp/servers/"+dev, admin, map[string]any{"description": "only tools",
		"spec": map[string]any{"connectors": []map[string]any{{"connector": tools}}}}))
	if !slices.Equal(upd.Connectors, []string{tools}) || upd.Description != "only tools" {
		t.Errorf("update server: %+v", upd)
	}
	c.want(422, "PUT", "/v1/mcp/servers/"+dev, admin, map[string]any{"spec": map[string]any{"connectors": []map[string]any{{"connector": "missing-" + uniq()}}}})
	c.want(404, "PUT", "/v1/mcp/servers/nope-"+uniq(), admin, map[string]any{"spec": map[string]any{"connectors": []map[string]any{{"connector": tools}}}})

	// Grants.
	g := mcpDecode[mcpGrantView](t, c.want(200, "PUT", "/v1/mcp/servers/"+dev+"/grants/"+agentID, admin, nil))
	if g.ServerID != dev || g.PrincipalID != agentID || g.CreatedBy != human.ID {
		t.Errorf("grant: %+v", g)
	}
	c.want(200, "PUT", "/v1/mcp/servers/"+dev+"/grants/"+agentID, admin, nil) // idempotent
	c.want(404, "PUT", "/v1/mcp/servers/"+dev+"/grants/pr-nobody", admin, nil)
	c.want(404, "PUT", "/v1/mcp/servers/nope-"+uniq()+"/grants/"+agentID, admin, nil)
	gl := mcpDecode[struct{ Grants []mcpGrantView }](t, c.want(200, "GET", "/v1/mcp/servers/"+dev+"/grants", admin, nil))
	if len(gl.Grants) != 1 || gl.Grants[0].PrincipalID != agentID {
		t.Errorf("grants: %+v", gl.Grants)
	}

	// What mcp:use sees: its granted servers, nothing else.
	mine := mcpDecode[struct{ Servers []mcpServerView }](t, c.want(200, "GET", "/v1/mcp/servers", agent, nil))
	if len(mine.Servers) != 1 || mine.Servers[0].ID != dev {
		t.Errorf("the agent's servers: %+v, want only %s", mine.Servers, dev)
	}
	c.want(200, "GET", "/v1/mcp/servers/"+dev, agent, nil)
	c.want(404, "GET", "/v1/mcp/servers/"+other, agent, nil)
	all := mcpDecode[struct{ Servers []mcpServerView }](t, c.want(200, "GET", "/v1/mcp/servers", admin, nil))
	if len(all.Servers) < 2 {
		t.Errorf("the admin's servers: %+v", all.Servers)
	}
	c.want(403, "GET", "/v1/mcp/connectors", agent, nil)
	c.want(403, "POST", "/v1/mcp/servers", agent, map[string]any{"id": "mine", "spec": map[string]any{"connectors": []map[string]any{{"connector": tools}}}})
	c.want(403, "PUT", "/v1/mcp/servers/"+other+"/grants/"+agentID, agent, nil)
	c.want(403, "GET", "/v1/mcp/tools", agent, nil)
	c.want(403, "GET", "/v1/mcp/servers", env.bKey, nil) // no mcp scope at all

	// Tool approvals.
	def := json.RawMessage(`{"name":"search","description":"Search code"}`)
	for _, h := range []string{"h1", "h2"} {
		if _, err := env.st.PutToolPin(ctx, store.MCPToolPin{Connector: gh, Tool: "search", Hash: h, Definition: def,
			State: store.MCPToolPending, FirstSeen: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	pending := mcpDecode[struct{ Tools []mcpToolView }](t, c.want(200, "GET", "/v1/mcp/tools?state=pending&connector="+gh, admin, nil))
	if len(pending.Tools) != 2 || pending.Tools[0].State != "pending" || pending.Tools[0].DecidedAt != nil {
		t.Errorf("pending: %+v", pending.Tools)
	}
	c.want(400, "GET", "/v1/mcp/tools?state=maybe", admin, nil)
	c.want(404, "GET", "/v1/mcp/tools?connector=nope-"+uniq(), admin, nil)
	ap := mcpDecode[mcpToolView](t, c.want(200, "POST", "/v1/mcp/tools/"+gh+"/search/h1/approve", admin, nil))
	if ap.State != "approved" || ap.DecidedBy != human.ID || ap.DecidedAt == nil {
		t.Errorf("approve: %+v", ap)
	}
	c.want(200, "POST", "/v1/mcp/tools/"+gh+"/search/h2/reject", admin, nil)
	c.want(404, "POST", "/v1/mcp/tools/"+gh+"/search/nope/approve", admin, nil)
	decided := mcpDecode[struct{ Tools []mcpToolView }](t, c.want(200, "GET", "/v1/mcp/tools?state=approved,rejected&connector="+gh, admin, nil))
	if len(decided.Tools) != 2 {
		t.Errorf("decided: %+v", decided.Tools)
	}

	// Credentials: the agent binds its own secret; the shared one and
	// another's are the admin's.
	sec := mcpDecode[struct{ ID string }](t, c.want(200, "POST", "/v1/secrets", agent, map[string]any{"name": "gh-token", "value": "ghp_agent"}))
	adminSec := mcpDecode[struct{ ID string }](t, c.want(200, "POST", "/v1/secrets", admin, map[string]any{"name": "gh-shared", "value": "ghp_shared"}))
	cr := mcpDecode[mcpCredentialView](t, c.want(200, "PUT", "/v1/mcp/connectors/"+gh+"/credentials", agent, map[string]any{"secret_id": sec.ID}))
	if cr.PrincipalID != agentID || cr.SecretID != sec.ID || cr.Kind != "header" {
		t.Errorf("own credential: %+v", cr)
	}
	c.want(404, "PUT", "/v1/mcp/connectors/"+gh+"/credentials", agent, map[string]any{"secret_id": adminSec.ID}) // not its secret
	c.want(403, "PUT", "/v1/mcp/connectors/"+gh+"/credentials", agent, map[string]any{"secret_id": sec.ID, "shared": true})
	c.want(403, "PUT", "/v1/mcp/connectors/"+gh+"/credentials", agent, map[string]any{"secret_id": sec.ID, "principal_id": env.bID})
	c.want(422, "PUT", "/v1/mcp/connectors/"+gh+"/credentials", agent, map[string]any{"secret_id": sec.ID, "kind": "magic"})
	c.want(404, "PUT", "/v1/mcp/connectors/nope-"+uniq()+"/credentials", agent, map[string]any{"secret_id": sec.ID})
	sh := mcpDecode[mcpCredentialView](t, c.want(200, "PUT", "/v1/mcp/connectors/"+gh+"/credentials", admin, map[string]any{"secret_id": adminSec.ID, "shared": true}))
	if sh.PrincipalID != "" {
		t.Errorf("shared credential: %+v", sh)
	}
	if b, err := env.st.GetMCPCredential(ctx, gh, agentID); err != nil || b.SecretID != sec.ID {
		t.Errorf("stored own binding: %+v %v", b, err)
	}
	c.want(403, "DELETE", "/v1/mcp/connectors/"+gh+"/credentials?shared=true", agent, nil)
	c.want(204, "DELETE", "/v1/mcp/connectors/"+gh+"/credentials", agent, nil)
	c.want(404, "DELETE", "/v1/mcp/connectors/"+gh+"/credentials", agent, nil)
	c.want(204, "DELETE", "/v1/mcp/connectors/"+gh+"/credentials?shared=true", admin, nil)

	// Revoke, delete; what is gone is gone.
	c.want(204, "DELETE", "/v1/mcp/servers/"+dev+"/grants/"+agentID, admin, nil)
	c.want(404, "DELETE", "/v1/mcp/servers/"+dev+"/grants/"+agentID, admin, nil)
	c.want(404, "GET", "/v1/mcp/servers/"+dev, agent, nil)
	c.want(204, "DELETE", "/v1/mcp/connectors/"+gh, admin, nil) // dev no longer uses it
	c.want(404, "GET", "/v1/mcp/connectors/"+gh, admin, nil)
	if ps, _ := env.st.ListToolPins(ctx, store.MCPToolPinFilter{Connector: gh}); len(ps) != 0 {
		t.Errorf("pins outlived their connector: %+v", ps)
	}
	c.want(204, "DELETE", "/v1/mcp/servers/"+dev, admin, nil)
	c.want(404, "DELETE", "/v1/mcp/servers/"+dev, admin, nil)
	c.want(204, "DELETE", "/v1/mcp/servers/"+other, admin, nil)
	c.want(204, "DELETE", "/v1/mcp/connectors/"+tools, admin, nil)

	// Every change was audited with its target.
	for _, a := range []string{"mcp.connector_create", "mcp.connector_update", "mcp.connector_delete", "mcp.server_create",
		"mcp.grant", "mcp.revoke", "mcp.tool_approve", "mcp.tool_reject", "mcp.credential_put", "mcp.credential_delete"} {
		evs, err := env.st.ListAudit(ctx, store.AuditFilter{Action: a, PrincipalID: human.ID, Limit: 1000})
		if a == "mcp.credential_put" || a == "mcp.credential_delete" {
			evs2, _ := env.st.ListAudit(ctx, store.AuditFilter{Action: a, PrincipalID: agentID, Limit: 1000})
			evs = append(evs, evs2...)
		}
		if err != nil || len(evs) == 0 {
			t.Errorf("no %s audit event: %v", a, err)
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.errs {
		t.Error(e)
	}
}
