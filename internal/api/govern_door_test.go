package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/agents"
	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/build"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/secrets"
	"github.com/warden-sandbox/warden/internal/store"
)

// Every test of this package fails (a 500) when a kinded route's handler
// succeeds without calling decide.
func init() { requireDecision = true }

// doorServer is a Server like the package's, with a governance engine whose
// access stage is the door's (as the daemon builds it), a template store, a
// builder and a secret vault, so that every kinded route reaches decide.
func doorServer(t *testing.T, gcfg govern.Config) (*govern.Engine, *httptest.Server) {
	t.Helper()
	gcfg.Store, gcfg.Audit, gcfg.Access = env.st, env.alog, govern.CheckedAccess()
	g := govern.New(gcfg)
	v, err := secrets.New(bytes.Repeat([]byte{7}, secrets.KeySize), &secrets.MemStore{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := env.srv.cfg
	cfg.Metrics = nil
	cfg.Govern = g
	cfg.Templates = mustStore(t.TempDir())
	cfg.Builder = &build.Builder{} // never reached: every build here is refused
	cfg.Secrets = v
	cfg.Webhooks, _ = testWebhookAdmin(t, v, nil, nil) // webhooks_test.go
	if as, ok := env.st.(agents.Store); ok {
		svc, err := agents.New(agents.Config{Store: as, Sandboxes: env.mgr, Keys: env.auth, LogDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Agents = svc // not started: no run is ever dispatched here
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { hs.Close(); g.Close() })
	return g, hs
}

type doorResp struct {
	status int
	body   []byte
	reqID  string
}

func (r doorResp) apiError(t *testing.T) apierr.BodyError {
	t.Helper()
	var b apierr.Body
	if err := json.Unmarshal(r.body, &b); err != nil {
		t.Fatalf("status %d, body %q: not an error body: %v", r.status, r.body, err)
	}
	return b.Error
}

// call makes one request with its own request ID.
func call(t *testing.T, hs *httptest.Server, key, method, path, ctype string, body []byte, hdr map[string]string) doorResp {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxT(t, 60*time.Second), method, hs.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	id := "req-door-" + uniq()
	req.Header.Set("X-Request-Id", id)
	req.Header.Set("Authorization", "Bearer "+key)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return doorResp{status: resp.StatusCode, body: b, reqID: id}
}

// eventsOf returns the audit events of one request, less the engine's own
// (approval.request when it opens an approval).
func eventsOf(t *testing.T, reqID string) []store.AuditEvent {
	t.Helper()
	var out []store.AuditEvent
	var after int64
	for {
		evs, err := env.st.ListAudit(ctxT(t, 10*time.Second), store.AuditFilter{After: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			return out
		}
		for _, ev := range evs {
			if ev.RequestID == reqID && !strings.HasPrefix(ev.Action, "approval.") {
				out = append(out, ev)
			}
		}
		after = evs[len(evs)-1].Seq
	}
}

// decisionOf returns the governed action and decision one audit event
// records.
func decisionOf(t *testing.T, ev store.AuditEvent) govern.AuditRecord {
	t.Helper()
	var d map[string]json.RawMessage
	if err := json.Unmarshal(ev.Detail, &d); err != nil {
		t.Fatalf("event %d detail %q: %v", ev.Seq, ev.Detail, err)
	}
	var rec govern.AuditRecord
	if raw, ok := d[govern.AuditKey]; !ok || json.Unmarshal(raw, &rec) != nil || rec.Action == nil {
		t.Fatalf("event %d (%s) has no governed action and decision: %s", ev.Seq, ev.Action, ev.Detail)
	}
	return rec
}

// TestRouteKinds: every route is a governed action kind or says why it is
// none.
func TestRouteKinds(t *testing.T) {
	for _, rt := range env.srv.routeTable() {
		switch {
		case rt.kind == "" && rt.nokind == "":
			t.Errorf("route %s has no kind: give it one (and call decide) or say why it has none (nokind)", rt.pattern)
		case rt.kind != "" && rt.nokind != "":
			t.Errorf("route %s has a kind and a nokind reason", rt.pattern)
		case rt.kind != "" && !rt.kind.Known():
			t.Errorf("route %s: kind %q is not a govern kind", rt.pattern, rt.kind)
		case rt.kind != "" && rt.public && rt.kind != govern.KindPortPreview:
			// Preview traffic authorizes inside (a key, a preview token, a
			// public port): its actor is the key's principal, or none.
			t.Errorf("route %s: a kinded route must authenticate (its actor is the principal)", rt.pattern)
		}
	}
}

// TestUndecidedRouteFails: a kinded route whose handler succeeds without
// calling decide is a 500 in tests (requireDecision), not a silent pass.
func TestUndecidedRouteFails(t *testing.T) {
	s := env.srv
	rt := route{pattern: "POST /undecided", action: "process.exec", scope: auth.ScopeSandboxesExec, kind: govern.KindExec,
		h: func(http.ResponseWriter, *http.Request) error { return nil }}
	h := s.requestID(s.accessLog(s.recoverPanics(s.serve(rt))))
	req := httptest.NewRequest(http.MethodPost, "/undecided", nil)
	req.Header.Set("Authorization", "Bearer "+env.aKey)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("undecided kinded route: status %d, want 500", rec.Code)
	}
	rt.h = func(w http.ResponseWriter, r *http.Request) error {
		return s.decide(r, &govern.Action{Exec: govern.NewExec([]string{"true"}, "", "", nil)})
	}
	rec = httptest.NewRecorder()
	s.requestID(s.accessLog(s.recoverPanics(s.serve(rt)))).ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("decided kinded route: status %d, want 200", rec.Code)
	}
}

// doorCase is one call of a kinded route.
type doorCase struct {
	route  string // the route table's pattern
	kind   govern.Kind
	key    string
	method string
	path   string
	ctype  string
	body   string
	hdr    map[string]string
}

// TestGovernDoorDenies drives every kinded route of the API with a policy
// that denies its kind: each call gets 403 forbidden with the rule's
// message and one audit event whose decision names the rule, its policy
// and version; and an access refusal (no scope) of a kinded route is
// decided by the engine's access stage, recorded the same way.
func TestGovernDoorDenies(t *testing.T) {
	ctx := ctxT(t, 120*time.Second)
	g, hs := doorServer(t, govern.Config{})
	admin := env.adminKey
	sb := env.sbA

	// A secret of the admin's to grant.
	r := call(t, hs, admin, "POST", "/v1/secrets", "application/json", []byte(`{"name":"door-`+uniq()+`","value":"door-secret-value"}`), nil)
	if r.status != http.StatusCreated && r.status != http.StatusOK {
		t.Fatalf("put secret: %d %s", r.status, r.body)
	}
	var sec struct {
		ID string `json:"id"`
	}
	json.Unmarshal(r.body, &sec)

	// An MCP connector for the mcp.admin routes that need one.
	mconn := "door-conn-" + uniq()
	if err := env.st.CreateConnector(ctx, store.MCPConnector{ID: mconn, Kind: store.MCPConnectorBuiltin, Spec: json.RawMessage(`{}`),
		CreatedAt: time.Now(), UpdatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	mspec := `{"id":"door-srv-` + uniq() + `","spec":{"connectors":[{"connector":"` + mconn + `"}]}}`

	// A hosted agent for the agent.change routes that act on one.
	agentName := "door-agent-" + uniq()
	r = call(t, hs, admin, "POST", "/v1/agents", "application/json", []byte(`{"name":"`+agentName+`","command":["true"]}`), nil)
	if r.status != http.StatusCreated {
		t.Fatalf("create a hosted agent: %d %s", r.status, r.body)
	}
	agentSpec := `{"name":"` + agentName + `","command":["true"],"template":"base"}`

	// An outgoing webhook endpoint (not delivering) for the webhook.change routes.
	hookName := "door-hook-" + uniq()
	hookDef := `{"url":"https://hooks.example.com/door","secret":"` + sec.ID + `","events":["*"],"enabled":false}`
	r = call(t, hs, admin, "POST", "/v1/webhooks", "application/json", []byte(`{"name":"`+hookName+`",`+hookDef[1:]), nil)
	if r.status != http.StatusCreated {
		t.Fatalf("create a webhook endpoint: %d %s", r.status, r.body)
	}

	pid := "door-deny-" + uniq()
	pol := govern.Policy{ID: pid, Scope: govern.Scope{Kind: govern.ScopeInstallation}}
	for _, k := range govern.Kinds() {
		pol.Rules = append(pol.Rules, govern.Rule{ID: "no-" + strings.ReplaceAll(string(k), ".", "-"), Kinds: []govern.Kind{k},
			Outcome: govern.Deny, Message: "no " + string(k) + " here"})
	}
	if _, err := g.CreatePolicy(ctx, pol, "test"); err != nil {
		t.Fatal(err)
	}

	ws := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
	sbp := "/v1/sandboxes/" + sb
	cases := []doorCase{
		{"POST /v1/sandboxes", govern.KindSandboxCreate, env.aKey, "POST", "/v1/sandboxes", "application/json", `{"template":"base","network":{"mode":"none"}}`, nil},
		{"POST /v1/sandboxes/{id}/exec", govern.KindExec, env.aKey, "POST", sbp + "/exec", "application/json", `{"cmd":["echo","hi"]}`, nil},
		{"POST /v1/sandboxes/{id}/git/clone", govern.KindExec, env.aKey, "POST", sbp + "/git/clone", "application/json", `{"url":"https://git.example.com/r.git"}`, nil},
		{"POST /v1/sandboxes/{id}/git/pull", govern.KindExec, env.aKey, "POST", sbp + "/git/pull", "application/json", `{"path":"r"}`, nil},
		{"POST /v1/sandboxes/{id}/git/commit", govern.KindExec, env.aKey, "POST", sbp + "/git/commit", "application/json", `{"path":"r","message":"m"}`, nil},
		{"POST /v1/sandboxes/{id}/git/push", govern.KindExec, env.aKey, "POST", sbp + "/git/push", "application/json", `{"path":"r"}`, nil},
		{"GET /v1/sandboxes/{id}/git/status", govern.KindExec, env.aKey, "GET", sbp + "/git/status?path=r", "", "", nil},
		{"GET /v1/sandboxes/{id}/pty", govern.KindPTY, env.aKey, "GET", sbp + "/pty?cmd=/bin/sh", "", "", ws},
		{"POST /v1/sandboxes/{id}/code/run", govern.KindCodeRun, env.aKey, "POST", sbp + "/code/run", "application/json", `{"code":"print(1)"}`, nil},
		{"GET /v1/sandboxes/{id}/files", govern.KindFileRead, env.aKey, "GET", sbp + "/files?path=/etc/hostname", "", "", nil},
		{"PUT /v1/sandboxes/{id}/files", govern.KindFileWrite, env.aKey, "PUT", sbp + "/files?path=/tmp/door", "application/octet-stream", "abc", nil},
		{"DELETE /v1/sandboxes/{id}/files", govern.KindFileRemove, env.aKey, "DELETE", sbp + "/files?path=/tmp/door", "", "", nil},
		{"GET /v1/sandboxes/{id}/fs/stat", govern.KindFileRead, env.aKey, "GET", sbp + "/fs/stat?path=/tmp", "", "", nil},
		{"GET /v1/sandboxes/{id}/fs/list", govern.KindFileRead, env.aKey, "GET", sbp + "/fs/list?path=/tmp", "", "", nil},
		{"POST /v1/sandboxes/{id}/fs/mkdir", govern.KindFileWrite, env.aKey, "POST", sbp + "/fs/mkdir", "application/json", `{"path":"/tmp/door-dir"}`, nil},
		{"POST /v1/sandboxes/{id}/fs/move", govern.KindFileWrite, env.aKey, "POST", sbp + "/fs/move", "application/json", `{"source":"/tmp/a","destination":"/tmp/b"}`, nil},
		{"GET /v1/sandboxes/{id}/fs/watch", govern.KindFileRead, env.aKey, "GET", sbp + "/fs/watch?path=/tmp", "", "", nil},
		{"GET /v1/sandboxes/{id}/archive", govern.KindFileRead, env.aKey, "GET", sbp + "/archive?path=/tmp", "", "", nil},
		{"PUT /v1/sandboxes/{id}/archive", govern.KindFileWrite, env.aKey, "PUT", sbp + "/archive?path=/tmp", "application/x-tar", "not a tar", nil},
		{"POST /v1/sandboxes/{id}/files/presign", govern.KindFileWrite, env.aKey, "POST", sbp + "/files/presign", "application/json", `{"path":"/tmp/x","op":"write"}`, nil},
		{"POST /v1/sandboxes/{id}/ports/{port}", govern.KindPortPreview, env.aKey, "POST", sbp + "/ports/8080", "application/json", `{"public":true}`, nil},
		{"POST /v1/sandboxes/{id}/ports/{port}/url", govern.KindPortPreview, env.aKey, "POST", sbp + "/ports/8080/url", "application/json", `{}`, nil},
		{"DELETE /v1/sandboxes/{id}", govern.KindLifecycle, env.aKey, "DELETE", sbp, "", "", nil},
		{"POST /v1/sandboxes/{id}/timeout", govern.KindLifecycle, env.aKey, "POST", sbp + "/timeout", "application/json", `{"timeout_seconds":60}`, nil},
		{"POST /v1/sandboxes/{id}/pause", govern.KindLifecycle, env.aKey, "POST", sbp + "/pause", "", "", nil},
		{"POST /v1/sandboxes/{id}/resume", govern.KindLifecycle, env.aKey, "POST", sbp + "/resume", "", "", nil},
		{"POST /v1/sandboxes/{id}/fork", govern.KindLifecycle, env.aKey, "POST", sbp + "/fork", "application/json", `{"count":1}`, nil},
		{"POST /v1/agents", govern.KindAgentChange, admin, "POST", "/v1/agents", "application/json", `{"name":"door-new-` + uniq() + `","command":["true"]}`, nil},
		{"PUT /v1/agents/{name}", govern.KindAgentChange, admin, "PUT", "/v1/agents/" + agentName, "application/json", agentSpec, nil},
		{"DELETE /v1/agents/{name}", govern.KindAgentChange, admin, "DELETE", "/v1/agents/" + agentName, "", "", nil},
		{"POST /v1/agents/{name}/runs", govern.KindAgentChange, admin, "POST", "/v1/agents/" + agentName + "/runs", "application/json", `{"input":{"x":1}}`, nil},
		{"POST /v1/webhooks", govern.KindWebhookChange, admin, "POST", "/v1/webhooks", "application/json", `{"name":"door-new-` + uniq() + `",` + hookDef[1:], nil},
		{"PUT /v1/webhooks/{name}", govern.KindWebhookChange, admin, "PUT", "/v1/webhooks/" + hookName, "application/json", hookDef, nil},
		{"DELETE /v1/webhooks/{name}", govern.KindWebhookChange, admin, "DELETE", "/v1/webhooks/" + hookName, "", "", nil},
		{"POST /v1/webhooks/{name}/test", govern.KindWebhookChange, admin, "POST", "/v1/webhooks/" + hookName + "/test", "", "", nil},
		{"POST /v1/sandboxes/{id}/snapshots", govern.KindSnapshot, env.aKey, "POST", sbp + "/snapshots", "application/json", `{"name":"door"}`, nil},
		{"DELETE /v1/snapshots/{name}", govern.KindSnapshot, env.aKey, "DELETE", "/v1/snapshots/door", "", "", nil},
		{"POST /v1/snapshots/{name}/promote", govern.KindSnapshot, admin, "POST", "/v1/snapshots/door/promote", "application/json", `{"template":"door-snap:1"}`, nil},
		{"POST /v1/volumes", govern.KindVolume, env.aKey, "POST", "/v1/volumes", "application/json", `{"name":"door","size_mb":16}`, nil},
		{"DELETE /v1/volumes/{name}", govern.KindVolume, env.aKey, "DELETE", "/v1/volumes/door", "", "", nil},
		{"POST /v1/volumes/{name}/resize", govern.KindVolume, env.aKey, "POST", "/v1/volumes/door/resize", "application/json", `{"size_mb":32}`, nil},
		{"GET /v1/volumes/{name}/files", govern.KindFileRead, env.aKey, "GET", "/v1/volumes/door/files?path=/a", "", "", nil},
		{"PUT /v1/volumes/{name}/files", govern.KindFileWrite, env.aKey, "PUT", "/v1/volumes/door/files?path=/a", "application/octet-stream", "abc", nil},
		{"POST /v1/volumes/{name}/snapshots", govern.KindVolume, env.aKey, "POST", "/v1/volumes/door/snapshots", "application/json", `{"name":"s"}`, nil},
		{"DELETE /v1/volumes/{name}/snapshots/{snapshot}", govern.KindVolume, env.aKey, "DELETE", "/v1/volumes/door/snapshots/s", "", "", nil},
		{"POST /v1/volumes/{name}/restore", govern.KindVolume, env.aKey, "POST", "/v1/volumes/door/restore", "application/json", `{"snapshot":"s"}`, nil},
		{"PUT /v1/sandboxes/{id}/network", govern.KindNetworkChange, env.aKey, "PUT", sbp + "/network", "application/json", `{"mode":"none"}`, nil},
		{"/v1/sandboxes/{id}/ports/{port}/proxy/{path...}", govern.KindPortPreview, env.aKey, "GET", sbp + "/ports/8080/proxy/x", "", "", nil},
		{"POST /v1/principals", govern.KindPrincipalChange, admin, "POST", "/v1/principals", "application/json", `{"kind":"agent","name":"door-` + uniq() + `"}`, nil},
		{"POST /v1/keys", govern.KindKeyChange, admin, "POST", "/v1/keys", "application/json", `{"scopes":["sandboxes:read"]}`, nil},
		{"DELETE /v1/keys/{id}", govern.KindKeyChange, admin, "DELETE", "/v1/keys/key_doornosuch", "", "", nil},
		{"POST /v1/templates/build", govern.KindTemplateBuild, admin, "POST", "/v1/templates/build?name=door-" + uniq() + ":1", "application/x-tar", "not a tar", nil},
		{"POST /v1/templates/import", govern.KindTemplateImport, admin, "POST", "/v1/templates/import", "application/json", `{"name":"door-` + uniq() + `:1","image":"alpine:3"}`, nil},
		{"POST /v1/templates/import", govern.KindTemplateImport, admin, "POST", "/v1/templates/import?name=door-" + uniq() + ":1", "application/x-tar", "not read", nil},
		{"POST /v1/secrets/{id}/grants", govern.KindSecretUse, admin, "POST", "/v1/secrets/" + sec.ID + "/grants", "application/json", `{"sandbox":"` + sb + `","hosts":["api.example.com"]}`, nil},
		{"POST /v1/mcp/connectors", govern.KindMCPAdmin, admin, "POST", "/v1/mcp/connectors", "application/json", `{"id":"door-new-` + uniq() + `","kind":"builtin"}`, nil},
		{"PUT /v1/mcp/connectors/{id}", govern.KindMCPAdmin, admin, "PUT", "/v1/mcp/connectors/" + mconn, "application/json", `{"description":"x","spec":{}}`, nil},
		{"DELETE /v1/mcp/connectors/{id}", govern.KindMCPAdmin, admin, "DELETE", "/v1/mcp/connectors/" + mconn, "", "", nil},
		{"PUT /v1/mcp/connectors/{id}/credentials", govern.KindMCPAdmin, admin, "PUT", "/v1/mcp/connectors/" + mconn + "/credentials", "application/json", `{"secret_id":"` + sec.ID + `"}`, nil},
		{"DELETE /v1/mcp/connectors/{id}/credentials", govern.KindMCPAdmin, admin, "DELETE", "/v1/mcp/connectors/" + mconn + "/credentials", "", "", nil},
		{"POST /v1/mcp/connectors/{id}/oauth", govern.KindMCPAdmin, admin, "POST", "/v1/mcp/connectors/" + mconn + "/oauth", "application/json", `{"shared":true}`, nil},
		{"POST /v1/mcp/servers", govern.KindMCPAdmin, admin, "POST", "/v1/mcp/servers", "application/json", mspec, nil},
		{"PUT /v1/mcp/servers/{id}", govern.KindMCPAdmin, admin, "PUT", "/v1/mcp/servers/door-srv", "application/json", `{"spec":{"connectors":[{"connector":"` + mconn + `"}]}}`, nil},
		{"DELETE /v1/mcp/servers/{id}", govern.KindMCPAdmin, admin, "DELETE", "/v1/mcp/servers/door-srv", "", "", nil},
		{"PUT /v1/mcp/servers/{id}/grants/{principal}", govern.KindMCPAdmin, admin, "PUT", "/v1/mcp/servers/door-srv/grants/" + env.aID, "", "", nil},
		{"DELETE /v1/mcp/servers/{id}/grants/{principal}", govern.KindMCPAdmin, admin, "DELETE", "/v1/mcp/servers/door-srv/grants/" + env.aID, "", "", nil},
		{"POST /v1/mcp/tools/{connector}/{tool}/{hash}/approve", govern.KindMCPAdmin, admin, "POST", "/v1/mcp/tools/" + mconn + "/t/h/approve", "", "", nil},
		{"POST /v1/mcp/tools/{connector}/{tool}/{hash}/reject", govern.KindMCPAdmin, admin, "POST", "/v1/mcp/tools/" + mconn + "/t/h/reject", "", "", nil},
	}

	// Every kinded route is driven here: each must reach decide.
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.route] = true
	}
	for _, rt := range env.srv.routeTable() {
		if rt.kind != "" && !covered[rt.pattern] {
			t.Errorf("kinded route %s has no case here", rt.pattern)
		}
	}

	for _, c := range cases {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			r := call(t, hs, c.key, c.method, c.path, c.ctype, []byte(c.body), c.hdr)
			e := r.apiError(t)
			want := "denied by policy: no " + string(c.kind) + " here"
			if r.status != http.StatusForbidden || e.Code != apierr.CodeForbidden || e.Message != want {
				t.Fatalf("status %d %s %q, want 403 forbidden %q", r.status, e.Code, e.Message, want)
			}
			evs := eventsOf(t, r.reqID)
			if len(evs) != 1 {
				t.Fatalf("%d audit events, want 1: %+v", len(evs), evs)
			}
			rec := decisionOf(t, evs[0])
			d := rec.Decision
			if evs[0].Outcome != "denied" || d.Outcome != govern.Deny || d.Stage != "rules" ||
				d.RuleID != "no-"+strings.ReplaceAll(string(c.kind), ".", "-") || d.PolicyID != pid || d.PolicyVersion != 1 {
				t.Errorf("audit event %s %s: decision %+v", evs[0].Action, evs[0].Outcome, d)
			}
			if rec.Action.Kind != c.kind || rec.Action.Surface != govern.SurfaceAPI || rec.Action.Principal.ID != evs[0].PrincipalID ||
				rec.Action.RequestID != r.reqID {
				t.Errorf("recorded action %+v", rec.Action)
			}
		})
	}

	// The attributes rules see, as recorded.
	r = call(t, hs, env.aKey, "POST", sbp+"/exec", "application/json", []byte(`{"command":"git push --force","cwd":"/tmp","env":{"B":"1","A":"2"}}`), nil)
	if r.status != http.StatusForbidden {
		t.Fatalf("exec: %d %s", r.status, r.body)
	}
	rec := decisionOf(t, eventsOf(t, r.reqID)[0])
	x := rec.Action.Exec
	if x == nil || x.Shell != "git push --force" || x.Cwd != "/tmp" || !slices.Equal(x.EnvKeys, []string{"A", "B"}) ||
		rec.Action.SandboxID != sb || rec.Action.Sandbox == nil || rec.Action.Sandbox.Owner != env.aID {
		t.Errorf("recorded exec action %+v, exec %+v", rec.Action, x)
	}
	r = call(t, hs, env.aKey, "PUT", sbp+"/files?path=/etc/x", "application/octet-stream", []byte("12345"), nil)
	if r.status != http.StatusForbidden {
		t.Fatalf("write: %d %s", r.status, r.body)
	}
	rec = decisionOf(t, eventsOf(t, r.reqID)[0])
	if f := rec.Action.File; f == nil || f.Path != "/etc/x" || f.Op != "write" || f.Size != 5 {
		t.Errorf("recorded file action %+v", rec.Action.File)
	}

	// An access refusal of a kinded route goes through the engine's
	// access stage: one event, the access stage's decision.
	_, roKey := govUser(t, "door-ro", auth.ScopeSandboxesRead)
	r = call(t, hs, roKey, "POST", sbp+"/exec", "application/json", []byte(`{"cmd":["true"]}`), nil)
	if e := r.apiError(t); r.status != http.StatusForbidden || e.Code != apierr.CodeForbidden {
		t.Fatalf("exec without scope: %d %s", r.status, r.body)
	}
	evs := eventsOf(t, r.reqID)
	if len(evs) != 1 || evs[0].Outcome != "denied" {
		t.Fatalf("audit events of the refused exec %+v, want one denial", evs)
	}
	if d := decisionOf(t, evs[0]).Decision; d.Stage != "access" || d.Outcome != govern.Deny {
		t.Errorf("access refusal decision %+v, want stage access, deny", d)
	}
	// Another principal's sandbox: the same 404 as before, decided at access.
	r = call(t, hs, env.bKey, "POST", sbp+"/exec", "application/json", []byte(`{"cmd":["true"]}`), nil)
	if e := r.apiError(t); r.status != http.StatusNotFound || e.Code != apierr.CodeNotFound {
		t.Fatalf("exec in another's sandbox: %d %s", r.status, r.body)
	}
	if d := decisionOf(t, eventsOf(t, r.reqID)[0]).Decision; d.Stage != "access" {
		t.Errorf("ownership refusal decision %+v, want stage access", d)
	}
}

// execOK runs a command and checks it ran (exit 0).
func execOK(t *testing.T, r doorResp) {
	t.Helper()
	if r.status != http.StatusOK || !bytes.Contains(r.body, []byte(`"type":"end"`)) || !bytes.Contains(r.body, []byte(`"exit_code":0`)) {
		t.Fatalf("exec: %d %s, want it to run", r.status, r.body)
	}
}

// heldExec asks for an exec a require_approval rule holds and returns the
// approval's id, checking the answer and its audit event.
func heldExec(t *testing.T, hs *httptest.Server, body string) string {
	t.Helper()
	r := call(t, hs, env.aKey, "POST", "/v1/sandboxes/"+env.sbA+"/exec", "application/json", []byte(body), nil)
	e := r.apiError(t)
	if r.status != http.StatusForbidden || e.Code != apierr.CodeApprovalRequired || e.ApprovalID == "" ||
		!strings.Contains(e.Message, e.ApprovalID) || !strings.Contains(e.Message, "echo commands need ops") {
		t.Fatalf("held exec: %d %s", r.status, r.body)
	}
	evs := eventsOf(t, r.reqID)
	if len(evs) != 1 || evs[0].Outcome != "denied" {
		t.Fatalf("audit events of the held exec %+v", evs)
	}
	if d := decisionOf(t, evs[0]).Decision; d.Outcome != govern.RequireApproval || d.RuleID != "echo-needs-ops" || d.ApprovalID != e.ApprovalID {
		t.Errorf("held exec decision %+v", d)
	}
	return e.ApprovalID
}

// TestGovernDoorApprovals: an exec held for approval, approved by another
// principal through the API, runs once when retried identically; a
// different command needs its own approval; a rejected one is refused; an
// expired one can no longer be decided and the retry is held anew.
func TestGovernDoorApprovals(t *testing.T) {
	ctx := ctxT(t, 120*time.Second)
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	g, hs := doorServer(t, govern.Config{ApprovalTTL: time.Minute, Now: now})
	_, opsKey := govUser(t, "door-ops", auth.ScopeApprovalsDecide)
	if _, err := g.CreatePolicy(ctx, govern.Policy{ID: "door-apr-" + uniq(), Scope: govern.Scope{Kind: govern.ScopePrincipal, ID: env.aID},
		Rules: []govern.Rule{{ID: "echo-needs-ops", Kinds: []govern.Kind{govern.KindExec}, When: `exec.cmd == "echo"`,
			Outcome: govern.RequireApproval, Message: "echo commands need ops"}}}, "test"); err != nil {
		t.Fatal(err)
	}
	one := `{"cmd":["echo","held-one"]}`
	first := heldExec(t, hs, one)
	// Held again while pending: the same approval.
	if again := heldExec(t, hs, one); again != first {
		t.Errorf("pending retry: approval %s, want %s", again, first)
	}
	// Other commands are not held.
	execOK(t, call(t, hs, env.aKey, "POST", "/v1/sandboxes/"+env.sbA+"/exec", "application/json", []byte(`{"cmd":["true"]}`), nil))

	// The requester cannot approve itself (agent A lacks the scope, and is
	// the requester); ops can.
	r := call(t, hs, env.aKey, "POST", "/v1/approvals/"+first+"/approve", "application/json", []byte(`{}`), nil)
	if r.status != http.StatusForbidden {
		t.Fatalf("self approval: %d %s", r.status, r.body)
	}
	r = call(t, hs, opsKey, "POST", "/v1/approvals/"+first+"/approve", "application/json", []byte(`{"reason":"fine"}`), nil)
	if r.status != http.StatusOK {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}

	// A different command needs its own approval.
	second := heldExec(t, hs, `{"cmd":["echo","held-two"]}`)
	if second == first {
		t.Fatal("a different command reused the approval")
	}
	// The identical retry runs once; its audit event names the approval.
	r = call(t, hs, env.aKey, "POST", "/v1/sandboxes/"+env.sbA+"/exec", "application/json", []byte(one), nil)
	execOK(t, r)
	evs := eventsOf(t, r.reqID)
	if len(evs) != 1 || evs[0].Outcome != "success" {
		t.Fatalf("audit events of the approved exec %+v", evs)
	}
	if d := decisionOf(t, evs[0]).Decision; d.Outcome != govern.Allow || d.ApprovalID != first || d.RuleID != "echo-needs-ops" {
		t.Errorf("approved exec decision %+v", d)
	}
	// The approval is used: the next identical exec is held anew.
	if third := heldExec(t, hs, one); third == first || third == second {
		t.Errorf("after use: approval %s, want a new one", third)
	}

	// Rejected: the identical retry is refused.
	r = call(t, hs, opsKey, "POST", "/v1/approvals/"+second+"/reject", "application/json", []byte(`{"reason":"no"}`), nil)
	if r.status != http.StatusOK {
		t.Fatalf("reject: %d %s", r.status, r.body)
	}
	r = call(t, hs, env.aKey, "POST", "/v1/sandboxes/"+env.sbA+"/exec", "application/json", []byte(`{"cmd":["echo","held-two"]}`), nil)
	if e := r.apiError(t); r.status != http.StatusForbidden || e.Code != apierr.CodeForbidden || !strings.HasPrefix(e.Message, "approval rejected") {
		t.Fatalf("rejected exec: %d %s", r.status, r.body)
	}
	if d := decisionOf(t, eventsOf(t, r.reqID)[0]).Decision; d.Outcome != govern.Deny || d.ApprovalID != second {
		t.Errorf("rejected exec decision %+v", d)
	}

	// Expired: past the TTL an approval can no longer be decided, and the
	// identical request opens a new one.
	fourth := heldExec(t, hs, `{"cmd":["echo","held-four"]}`)
	clock.Add(int64(2 * time.Minute))
	r = call(t, hs, opsKey, "POST", "/v1/approvals/"+fourth+"/approve", "application/json", []byte(`{}`), nil)
	if e := r.apiError(t); r.status != http.StatusConflict || e.Code != apierr.CodeConflict {
		t.Fatalf("approving an expired approval: %d %s", r.status, r.body)
	}
	if fifth := heldExec(t, hs, `{"cmd":["echo","held-four"]}`); fifth == fourth {
		t.Error("an expired approval still holds the action")
	}
	ap, err := g.GetApproval(context.WithoutCancel(ctx), fourth)
	if err != nil || ap.State != govern.ApprovalExpired {
		t.Errorf("expired approval: %+v, %v", ap, err)
	}
}
