package govern

import (
	"context"
	"testing"
)

// TestAgentChangeRule: a rule over agent.change's attributes (the CEL
// variable hosted_agent, the example in docs/agents.md) decides the
// definitions it names and no others.
func TestAgentChangeRule(t *testing.T) {
	e := newTestEngine(t, Config{}, scoped("agents", ScopeInstallation, "", Rule{ID: "no-admin-agents", Kinds: []Kind{KindAgentChange},
		When: `hosted_agent.op in ["create", "update"] && hosted_agent.scopes.exists(s, s == "admin")`, Outcome: Deny, Message: "no admin agents"}))
	act := func(op string, scopes ...string) *Action {
		return &Action{Kind: KindAgentChange, Surface: SurfaceAPI, Principal: Principal{ID: "alice", Kind: "user"},
			HostedAgent: &AgentChange{Op: op, Name: "coworker", Template: "base", Scopes: scopes}}
	}
	for _, c := range []struct {
		a    *Action
		want Outcome
	}{
		{act("create", "mcp:use", "admin"), Deny},
		{act("update", "admin"), Deny},
		{act("create", "mcp:use"), Allow},
		{act("run"), Allow},
		{act("delete", "admin"), Allow},
	} {
		d, err := e.Decide(context.Background(), c.a)
		if err != nil {
			t.Fatal(err)
		}
		if d.Outcome != c.want {
			t.Errorf("%s %v: %s, want %s", c.a.HostedAgent.Op, c.a.HostedAgent.Scopes, d.Outcome, c.want)
		}
	}
}
