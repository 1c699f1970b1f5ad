package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/internal/govern"
)

var lifecyclePolicy = govern.Policy{ID: "e2b-lnp", Scope: govern.Scope{Kind: govern.ScopeInstallation}, Rules: []govern.Rule{
	{ID: "no-pause", Kinds: []govern.Kind{govern.KindLifecycle}, When: `lifecycle.op == "pause"`, Outcome: govern.Deny, Message: "no pausing"},
	{ID: "no-forks", Kinds: []govern.Kind{govern.KindLifecycle}, When: `lifecycle.op == "fork" && lifecycle.count > 0`, Outcome: govern.Deny, Message: "no forks"},
	{ID: "no-open-net", Kinds: []govern.Kind{govern.KindNetworkChange}, When: `network.mode == "open"`, Outcome: govern.Deny, Message: "no open network"},
	{ID: "no-admin", Kinds: []govern.Kind{govern.KindPortPreview}, When: `port.path.startsWith("/admin")`, Outcome: govern.Deny, Message: "the admin page is closed"},
}}

// TestE2BDoorLifecycleNetworkPreview: the E2B door's lifecycle routes
// (sandbox.lifecycle), its network update (network.change) and each request
// to a user port (port.preview) are decided by the rules: a refusal is
// E2B's 403 with the rule's message and one audit event naming the rule;
// what no rule refuses is done and its event records the decision.
func TestE2BDoorLifecycleNetworkPreview(t *testing.T) {
	hs := governedServer(t, lifecyclePolicy)
	call := func(method, path string, hdr map[string]string, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
		req.Header.Set("X-API-Key", env.aKey)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, b.Bytes()
	}
	st, b := call("POST", "/v2/sandboxes", nil, `{"templateID":"base","timeout":120}`)
	if st != 201 {
		t.Fatalf("create: %d %s", st, b)
	}
	var sb created
	decodeJSON(t, b, &sb)
	t.Cleanup(func() { env.mgr.Kill(context.Background(), sb.SandboxID, "test cleanup") })
	sp := "/sandboxes/" + sb.SandboxID

	refused := func(what string, st int, b []byte, msg string) {
		t.Helper()
		wantError(t, 403, st, b)
		if !strings.Contains(string(b), "denied by policy: "+msg) {
			t.Fatalf("%s: %s, want %q", what, b, msg)
		}
	}
	st, b = call("POST", sp+"/pause", nil, `{}`)
	refused("pause", st, b, "no pausing")
	st, b = call("POST", sp+"/pause", nil, `{"memory":false}`)
	refused("cold pause", st, b, "no pausing")
	st, b = call("POST", sp+"/fork", nil, `{"count":1}`)
	refused("fork", st, b, "no forks")
	st, b = call("PUT", sp+"/network", nil, `{"allow_internet_access":true}`)
	refused("network open", st, b, "no open network")
	if st, b = call("POST", sp+"/timeout", nil, `{"timeout":90}`); st != 204 {
		t.Fatalf("timeout no rule refuses: %d %s", st, b)
	}
	if st, b = call("POST", "/v2"+sp+"/connect", nil, `{"timeout":90}`); st != 200 {
		t.Fatalf("connect no rule refuses: %d %s", st, b)
	}
	// An allowlist is no rule's: not refused by policy (the fake backend
	// may not set it; the decision is what is checked here).
	if st, b = call("PUT", sp+"/network", nil, `{"allowOut":["API.example.com","1.2.3.4"],"denyOut":["0.0.0.0/0"]}`); st == 403 {
		t.Fatalf("allowlist refused: %s", b)
	}

	// A user port: each request decided, as the key the tokens are bound to.
	port := map[string]string{"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "8080", "E2b-Traffic-Access-Token": *sb.TrafficAccessToken}
	st, b = call("GET", "/admin/users?x=1", port, "")
	refused("admin page", st, b, "the admin page is closed")
	if st, b = call("GET", "/index.html", port, ""); st == 403 {
		t.Fatalf("a page no rule refuses: %d %s", st, b)
	}

	type seen struct{ action, outcome, rule string }
	var got []seen
	recs := map[string]govern.AuditRecord{}
	for _, ev := range auditActions(t, sb.SandboxID) {
		var d map[string]json.RawMessage
		json.Unmarshal(ev.Detail, &d)
		var rec govern.AuditRecord
		if raw, ok := d[govern.AuditKey]; !ok || json.Unmarshal(raw, &rec) != nil || rec.Action == nil {
			continue
		}
		if rec.Action.Kind != govern.KindLifecycle && rec.Action.Kind != govern.KindNetworkChange && rec.Action.Kind != govern.KindPortPreview {
			continue
		}
		if rec.Action.Surface != govern.SurfaceE2B || rec.Action.SandboxID != sb.SandboxID || rec.Action.Principal.ID != env.aID {
			t.Errorf("%s: recorded action %+v", ev.Action, rec.Action)
		}
		got = append(got, seen{ev.Action, ev.Outcome, rec.Decision.RuleID})
		recs[ev.Action+"/"+ev.Outcome] = rec
	}
	// auditActions lists the oldest first.
	want := []seen{
		{"e2b.sandbox.pause", "denied", "no-pause"},
		{"e2b.sandbox.pause", "denied", "no-pause"},
		{"e2b.sandbox.fork", "denied", "no-forks"},
		{"e2b.network.update", "denied", "no-open-net"},
		{"e2b.sandbox.timeout", "success", ""},
		{"e2b.sandbox.connect", "success", ""},
		{"e2b.network.update", "", ""}, // success or error, no rule
		{"e2b.port.proxy", "denied", "no-admin"},
	}
	if len(got) != len(want) {
		t.Fatalf("governed events %+v, want %+v", got, want)
	}
	for i := range want {
		w := want[i]
		if w.outcome == "" {
			w.outcome = got[i].outcome
		}
		if got[i] != w {
			t.Errorf("event %d: %+v, want %+v", i, got[i], w)
		}
	}
	if p := recs["e2b.port.proxy/denied"].Action.Port; p == nil || p.Port != 8080 || p.Path != "/admin/users" || p.Method != "GET" || p.Via != "token" {
		t.Errorf("recorded port %+v", p)
	}
	if l := recs["e2b.sandbox.fork/denied"].Action.Lifecycle; l == nil || l.Op != govern.OpFork || l.Count != 1 {
		t.Errorf("recorded fork %+v", l)
	}
	if l := recs["e2b.sandbox.connect/success"].Action.Lifecycle; l == nil || l.Op != govern.OpConnect || l.TimeoutSeconds != 90 {
		t.Errorf("recorded connect %+v", l)
	}
	if n := recs["e2b.network.update/denied"].Action.Network; n == nil || n.Mode != "open" {
		t.Errorf("recorded network %+v", n)
	}
	for k, rec := range recs {
		if strings.HasPrefix(k, "e2b.network.update/") && k != "e2b.network.update/denied" {
			if n := rec.Action.Network; n == nil || n.Mode != "allowlist" || strings.Join(n.Allow, ",") != "api.example.com,1.2.3.4/32" {
				t.Errorf("recorded allowlist %+v", n)
			}
		}
	}
}
