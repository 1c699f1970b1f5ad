package api

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/api/apierr"
	"github.com/warden-sandbox/warden/internal/govern"
)

// TestGovernLifecycleNetworkPreview: sandbox lifecycle (sandbox.lifecycle),
// network policy changes (network.change) and each request through the
// port proxy (port.preview) are decided by the engine's rules at the native
// door, with one audit event naming the rule; what a rule does not match
// goes on, recorded with its attributes.
func TestGovernLifecycleNetworkPreview(t *testing.T) {
	ctx := ctxT(t, 120*time.Second)
	g, hs := doorServer(t, govern.Config{})
	pid := "lnp-" + uniq()
	pol := govern.Policy{ID: pid, Scope: govern.Scope{Kind: govern.ScopeInstallation}, Rules: []govern.Rule{
		{ID: "no-pause", Kinds: []govern.Kind{govern.KindLifecycle}, When: `lifecycle.op == "pause"`, Outcome: govern.Deny, Message: "no pausing"},
		{ID: "no-long-timeouts", Kinds: []govern.Kind{govern.KindLifecycle}, When: `lifecycle.op == "timeout" && lifecycle.timeout_seconds > 3600`,
			Outcome: govern.Deny, Message: "an hour at most"},
		{ID: "no-open-net", Kinds: []govern.Kind{govern.KindNetworkChange}, When: `network.mode == "open"`, Outcome: govern.Deny, Message: "no open network"},
		{ID: "no-admin", Kinds: []govern.Kind{govern.KindPortPreview}, When: `port.path.startsWith("/admin")`, Outcome: govern.Deny, Message: "the admin page is closed"},
	}}
	if _, err := g.CreatePolicy(ctx, pol, "test"); err != nil {
		t.Fatal(err)
	}
	sbp := "/v1/sandboxes/" + env.sbA

	denied := func(t *testing.T, r doorResp, msg, rule, action string) govern.AuditRecord {
		t.Helper()
		e := r.apiError(t)
		if r.status != http.StatusForbidden || e.Code != apierr.CodeForbidden || e.Message != "denied by policy: "+msg {
			t.Fatalf("status %d %s %q, want 403 forbidden %q", r.status, e.Code, e.Message, "denied by policy: "+msg)
		}
		evs := eventsOf(t, r.reqID)
		if len(evs) != 1 || evs[0].Action != action || evs[0].Outcome != "denied" {
			t.Fatalf("audit events %+v, want one %s denied", evs, action)
		}
		rec := decisionOf(t, evs[0])
		if d := rec.Decision; d.Outcome != govern.Deny || d.RuleID != rule || d.PolicyID != pid || d.PolicyVersion != 1 {
			t.Fatalf("decision %+v, want rule %s of %s", d, rule, pid)
		}
		if rec.Action.SandboxID != env.sbA || rec.Action.Surface != govern.SurfaceAPI {
			t.Errorf("recorded action %+v", rec.Action)
		}
		return rec
	}

	t.Run("lifecycle", func(t *testing.T) {
		rec := denied(t, call(t, hs, env.aKey, "POST", sbp+"/pause", "", nil, nil), "no pausing", "no-pause", "sandbox.pause")
		if l := rec.Action.Lifecycle; rec.Action.Kind != govern.KindLifecycle || l == nil || l.Op != govern.OpPause {
			t.Errorf("recorded %+v lifecycle %+v", rec.Action, l)
		}
		rec = denied(t, call(t, hs, env.aKey, "POST", sbp+"/timeout", "application/json", []byte(`{"timeout_seconds":7200}`), nil),
			"an hour at most", "no-long-timeouts", "sandbox.timeout")
		if l := rec.Action.Lifecycle; l == nil || l.Op != govern.OpTimeout || l.TimeoutSeconds != 7200 {
			t.Errorf("recorded lifecycle %+v", l)
		}
		// A timeout the rule allows is done, its event recording the decision.
		r := call(t, hs, env.aKey, "POST", sbp+"/timeout", "application/json", []byte(`{"timeout_seconds":600}`), nil)
		if r.status != http.StatusOK {
			t.Fatalf("allowed timeout: %d %s", r.status, r.body)
		}
		evs := eventsOf(t, r.reqID)
		if len(evs) != 1 || evs[0].Outcome != "success" {
			t.Fatalf("allowed timeout events %+v", evs)
		}
		if rec := decisionOf(t, evs[0]); rec.Decision.Outcome != govern.Allow || rec.Action.Lifecycle == nil || rec.Action.Lifecycle.TimeoutSeconds != 600 {
			t.Errorf("allowed timeout record %+v %+v", rec.Decision, rec.Action.Lifecycle)
		}
	})

	t.Run("network", func(t *testing.T) {
		rec := denied(t, call(t, hs, env.aKey, "PUT", sbp+"/network", "application/json", []byte(`{"mode":"open"}`), nil),
			"no open network", "no-open-net", "network.update")
		if n := rec.Action.Network; rec.Action.Kind != govern.KindNetworkChange || n == nil || n.Mode != "open" {
			t.Errorf("recorded %+v network %+v", rec.Action, n)
		}
		// An allowlist is described with its hosts, normalised.
		r := call(t, hs, env.aKey, "PUT", sbp+"/network", "application/json",
			[]byte(`{"mode":"allowlist","allow":[{"host":"API.Example.com."},{"cidr":"10.0.0.0/8"}]}`), nil)
		if r.status == http.StatusForbidden {
			t.Fatalf("allowlist refused: %s", r.body)
		}
		evs := eventsOf(t, r.reqID)
		if len(evs) != 1 {
			t.Fatalf("allowlist events %+v", evs)
		}
		n := decisionOf(t, evs[0]).Action.Network
		if n == nil || n.Mode != "allowlist" || strings.Join(n.Allow, ",") != "api.example.com,10.0.0.0/8" {
			t.Errorf("recorded network %+v", n)
		}
	})

	t.Run("preview", func(t *testing.T) {
		// With a key: the key's principal acts.
		rec := denied(t, call(t, hs, env.aKey, "GET", sbp+"/ports/8080/proxy/admin/users?x=1", "", nil, nil),
			"the admin page is closed", "no-admin", "port.proxy")
		p := rec.Action.Port
		if p == nil || p.Port != 8080 || p.Path != "/admin/users" || p.Method != "GET" || p.Via != "key" || p.Public ||
			rec.Action.Principal.ID != env.aID {
			t.Errorf("recorded %+v port %+v", rec.Action, p)
		}
		// Another path is not the rule's: it goes to the port (nothing
		// listens there in the fake sandbox), not refused by policy.
		r := call(t, hs, env.aKey, "POST", sbp+"/ports/8080/proxy/ok", "", nil, nil)
		if e := r.apiError(t); r.status == http.StatusForbidden || strings.Contains(e.Message, "denied by policy") {
			t.Fatalf("a path no rule matches: %d %s", r.status, r.body)
		}

		// With a preview URL's token: no principal, still decided and
		// audited, naming the rule.
		r = call(t, hs, env.aKey, "POST", sbp+"/ports/8080/url", "application/json", []byte(`{}`), nil)
		var u struct {
			URL string `json:"url"`
		}
		if r.status != http.StatusOK || json.Unmarshal(r.body, &u) != nil {
			t.Fatalf("preview url: %d %s", r.status, r.body)
		}
		pu, err := url.Parse(u.URL)
		if err != nil {
			t.Fatal(err)
		}
		q := pu.Query()
		path := strings.TrimSuffix(pu.Path, "/") + "/admin?" + q.Encode()
		rec = denied(t, call(t, hs, "", "GET", path, "", nil, nil), "the admin page is closed", "no-admin", "port.proxy")
		if p := rec.Action.Port; p == nil || p.Via != "token" || p.Path != "/admin" || rec.Action.Principal.ID != "" {
			t.Errorf("recorded %+v port %+v", rec.Action, p)
		}
	})
}
