package govern

import (
	"slices"
	"testing"
)

// TestAttachPolicy: a policy attached to a principal (a hosted agent's
// spec policies) applies to its actions besides its own scope: its deny
// rules, its defaults and its guard; detaching ends that, and other
// principals are never affected.
func TestAttachPolicy(t *testing.T) {
	// Scoped to a group nobody is in: on its own it applies to no one.
	p := scoped("agent-rules", ScopeGroup, "nobody",
		Rule{ID: "no-curl", Kinds: []Kind{KindExec}, When: `exec.cmd == "curl"`, Outcome: Deny, Message: "no curl for this agent"})
	p.Defaults = map[Kind]Outcome{KindFileRead: Deny}
	e := newTestEngine(t, Config{}, p)
	decide := func(a *Action) Decision {
		t.Helper()
		d, err := e.Decide(t.Context(), a)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	read := func(principal string) *Action {
		return &Action{Kind: KindFileRead, Surface: SurfaceAPI, Principal: Principal{ID: principal, Kind: "agent"},
			SandboxID: "sb-1", File: &File{Path: "/etc/hosts"}}
	}
	if d := decide(execAction("bot", "curl", "x")); d.Outcome != Allow {
		t.Fatalf("before attaching: %+v", d)
	}
	e.Attach("bot", []string{"agent-rules", "not-yet-a-policy"})
	if got := e.Attached("bot"); !slices.Contains(got, "agent-rules") || len(got) != 2 {
		t.Fatalf("attached = %v", got)
	}
	if d := decide(execAction("bot", "curl", "x")); d.Outcome != Deny || d.PolicyID != "agent-rules" || d.Message != "no curl for this agent" {
		t.Fatalf("attached deny rule: %+v", d)
	}
	if d := decide(execAction("bot", "ls")); d.Outcome != Allow {
		t.Fatalf("a command the rule does not name: %+v", d)
	}
	if d := decide(read("bot")); d.Outcome != Deny || d.PolicyID != "agent-rules" {
		t.Fatalf("attached default: %+v", d)
	}
	if d := decide(execAction("other", "curl", "x")); d.Outcome != Allow {
		t.Fatalf("another principal: %+v", d)
	}
	if d := decide(read("other")); d.Outcome != Allow {
		t.Fatalf("another principal's read: %+v", d)
	}
	// Replacing the attachment, then detaching.
	e.Attach("bot", []string{"not-yet-a-policy"})
	if d := decide(execAction("bot", "curl", "x")); d.Outcome != Allow {
		t.Fatalf("after replacing: %+v", d)
	}
	e.Attach("bot", []string{"agent-rules"})
	e.Attach("bot", nil)
	if d := decide(execAction("bot", "curl", "x")); d.Outcome != Allow || len(e.Attached("bot")) != 0 {
		t.Fatalf("after detaching: %+v", d)
	}
	if !e.HasPolicy("agent-rules") || e.HasPolicy("not-yet-a-policy") {
		t.Fatal("HasPolicy")
	}
	// An attachment survives the policy's reload (an update).
	e.Attach("bot", []string{"agent-rules"})
	p.Rules[0].Message = "still no curl"
	if _, err := e.UpdatePolicy(t.Context(), p, "admin"); err != nil {
		t.Fatal(err)
	}
	if d := decide(execAction("bot", "curl", "x")); d.Outcome != Deny || d.Message != "still no curl" {
		t.Fatalf("after an update: %+v", d)
	}
}

// TestAgentChangeEnforcedAttributes: agent.change describes a spec's
// secrets, policies and team, so a rule can hold back definitions that
// grant a given secret or join a team.
func TestAgentChangeEnforcedAttributes(t *testing.T) {
	e := newTestEngine(t, Config{}, scoped("agents", ScopeInstallation, "", Rule{ID: "guarded", Kinds: []Kind{KindAgentChange},
		When:    `hosted_agent.secrets.exists(s, s == "prod-key") || hosted_agent.team == "finance" || "lax" in hosted_agent.policies`,
		Outcome: Deny}))
	for _, c := range []struct {
		ch   AgentChange
		want Outcome
	}{
		{AgentChange{Op: "create", Name: "a", Secrets: []string{"dev-key", "prod-key"}}, Deny},
		{AgentChange{Op: "create", Name: "a", Team: "finance"}, Deny},
		{AgentChange{Op: "update", Name: "a", Policies: []string{"strict", "lax"}}, Deny},
		{AgentChange{Op: "create", Name: "a", Secrets: []string{"dev-key"}, Team: "ops", Policies: []string{"strict"}}, Allow},
	} {
		ch := c.ch
		d, err := e.Decide(t.Context(), &Action{Kind: KindAgentChange, Surface: SurfaceAPI, Principal: Principal{ID: "alice", Kind: "user"}, HostedAgent: &ch})
		if err != nil {
			t.Fatal(err)
		}
		if d.Outcome != c.want {
			t.Errorf("%+v: %s, want %s", c.ch, d.Outcome, c.want)
		}
	}
}
