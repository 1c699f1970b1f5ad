package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// testAgentEnforced: a spec's secrets become grants of the run's sandbox
// (the placeholder and the broker's CA in the run's environment, never the
// value; gone with the sandbox), a secret of someone else is refused, and
// a spec's policies attach to the agent's principal: a rule of the policy
// denies that principal's exec (not others'), until the spec drops it;
// two agents of one team share a memory through the MCP memory tools.
func testAgentEnforced(t *testing.T, d *daemon, c *warden.Client) {
	ctx := ctxT(t)
	const value = "sk-agent-THE-REAL-SECRET-0123456789"
	sec, err := c.PutSecret(ctx, "agent-token", value)
	if err != nil {
		t.Fatal(err)
	}
	script := `echo "tok=$TOKEN ca=$SSL_CERT_FILE"; grep -rlsF "` + value + `" /etc /home /tmp /proc/self/environ 2>/dev/null; true`
	createAgent(t, c, map[string]any{"name": "withsecret", "command": []string{"/bin/sh", "-c", script},
		"secrets": []map[string]any{{"secret": "agent-token", "hosts": []string{"api.example.com"}, "env_name": "TOKEN"}}})
	r, err := c.RunAgent(ctx, "withsecret", nil)
	if err != nil {
		t.Fatal(err)
	}
	r = waitRun(t, c, r.ID, "ended", warden.AgentRun.Ended)
	out, all := runLog(t, c, r.ID)
	if r.State != warden.AgentRunSucceeded || !strings.Contains(out, "tok=warden-ph-") || !strings.Contains(out, "ca=/etc/ssl/warden-ca-bundle.pem") {
		t.Fatalf("run %+v: want the placeholder and the CA bundle in its environment:\n%s", r, all)
	}
	if strings.Contains(all, value) || strings.Contains(out, "/proc") || strings.Contains(out, "/tmp") || strings.Contains(out, "/home") {
		t.Fatalf("the secret's value is readable in the run's sandbox:\n%s", all)
	}
	// The grant was the run sandbox's and went with it.
	sandboxEnded(t, c, r.SandboxID)
	deadline := time.Now().Add(10 * time.Second)
	for {
		gs, err := c.ListGrants(ctx, sec.ID)
		live := 0
		for _, g := range gs {
			if !g.Revoked {
				live++
				if g.Sandbox != r.SandboxID || g.ManagedBy != "agent:withsecret" {
					t.Fatalf("grant %+v: want the run sandbox's, managed by the agent", g)
				}
			}
		}
		if err == nil && live == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("grants after the run: %+v %v", gs, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Someone else's secret cannot be granted to one's agent.
	p, err := c.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: "user", Name: "carol"})
	if err != nil {
		t.Fatal(err)
	}
	k, err := c.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: p.ID, Name: "k", Scopes: []string{"agents:write", "agents:read"}})
	if err != nil {
		t.Fatal(err)
	}
	b := []byte(`{"name":"stealer","command":["true"],"secrets":[{"secret":"` + sec.ID + `","hosts":["api.example.com"]}]}`)
	if _, err := d.client(t, k.Key).CreateAgent(ctx, b); !warden.IsForbidden(err) {
		t.Fatalf("an agent with another owner's secret: %v, want 403", err)
	}

	// Policies: attached to the agent's principal by its spec.
	if _, err := c.CreatePolicy(ctx, warden.PolicyWrite{ID: "agent-no-touch", Scope: warden.PolicyScope{Kind: "group", ID: "nobody"},
		Rules: []warden.Rule{{ID: "no-touch", Kinds: []string{"exec"}, When: `exec.cmd == "touch"`, Outcome: "deny", Message: "no touch for this agent"}}}); err != nil {
		t.Fatal(err)
	}
	pa := createAgent(t, c, map[string]any{"name": "withpolicy", "command": []string{"true"}, "policies": []string{"agent-no-touch"}})
	ak, err := c.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: pa.PrincipalID, Name: "test", Scopes: []string{"sandboxes:create", "sandboxes:exec", "sandboxes:read", "sandboxes:delete"}})
	if err != nil {
		t.Fatal(err)
	}
	ac := d.client(t, ak.Key)
	sb := create(t, ac, warden.CreateSandboxRequest{})
	defer c.KillSandbox(ctx, sb.ID)
	touch := warden.ExecRequest{Cmd: []string{"touch", "/tmp/x"}}
	if _, err := ac.Exec(ctx, sb.ID, touch, warden.ExecIO{}); err == nil || !strings.Contains(err.Error(), "no touch for this agent") {
		t.Fatalf("the agent's exec under its policy: %v, want the rule's denial", err)
	}
	if _, err := ac.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"true"}}, warden.ExecIO{}); err != nil {
		t.Fatalf("a command the rule does not name: %v", err)
	}
	if _, err := c.Exec(ctx, sb.ID, touch, warden.ExecIO{}); err != nil {
		t.Fatalf("another principal's exec: %v", err)
	}
	upd := []byte(`{"name":"withpolicy","command":["true"]}`)
	if _, err := c.UpdateAgent(ctx, "withpolicy", upd); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.Exec(ctx, sb.ID, touch, warden.ExecIO{}); err != nil {
		t.Fatalf("the agent's exec once its spec dropped the policy: %v", err)
	}

	testAgentTeamMemory(t, d, c)
}

// testAgentTeamMemory: agents naming one team write and read one memory
// with the tools' scope team, each write attributed to its agent; an agent
// outside the team is refused.
func testAgentTeamMemory(t *testing.T, d *daemon, c *warden.Client) {
	ctx := ctxT(t)
	adminCall(t, d, d.adminKey, "POST", "/v1/mcp/connectors", map[string]any{"id": "teammem", "kind": "builtin",
		"spec": map[string]any{"tools": []string{"memory_remember", "memory_recall", "memory_list", "memory_forget"}}})
	adminCall(t, d, d.adminKey, "POST", "/v1/mcp/servers", map[string]any{"id": "teamsrv",
		"spec": map[string]any{"connectors": []any{map[string]any{"connector": "teammem"}}}})
	sessions := map[string]*mcp.ClientSession{}
	for _, name := range []string{"crew-a", "crew-b", "loner"} {
		spec := map[string]any{"name": name, "command": []string{"true"}, "mcp_servers": []string{"teamsrv"}}
		if name != "loner" {
			spec["memory"] = map[string]any{"team": "crew"}
		}
		a := createAgent(t, c, spec)
		k, err := c.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: a.PrincipalID, Name: "mcp", Scopes: []string{"mcp:use"}})
		if err != nil {
			t.Fatal(err)
		}
		sessions[name] = mcpConnect(t, d, k.Key, "teamsrv")
		defer sessions[name].Close()
	}
	call := func(agent, tool string, args map[string]any) (string, bool) {
		t.Helper()
		res, err := sessions[agent].CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatalf("%s %s %v: %v", agent, tool, args, err)
		}
		return mcpText(res), res.IsError
	}
	if text, isErr := call("crew-a", "memory_remember", map[string]any{"key": "oncall", "text": "dana is on call", "scope": "team"}); isErr {
		t.Fatalf("team write: %s", text)
	}
	if text, isErr := call("crew-b", "memory_recall", map[string]any{"key": "oncall", "scope": "team"}); isErr ||
		!strings.Contains(text, "dana is on call") || !strings.Contains(text, `"agent":"crew-a"`) {
		t.Fatalf("the other team member's read: %v %s", isErr, text)
	}
	if text, _ := call("crew-b", "memory_recall", map[string]any{"key": "oncall"}); strings.Contains(text, "dana") {
		t.Fatalf("the team note is in crew-b's own memory: %s", text)
	}
	if text, isErr := call("loner", "memory_recall", map[string]any{"key": "oncall", "scope": "team"}); !isErr || strings.Contains(text, "dana") {
		t.Fatalf("an agent outside the team read it: %v %s", isErr, text)
	}
	// Reviewers see it under the team's namespace.
	es, err := c.ListMemory(ctx, "team.crew", warden.MemoryQuery{})
	if err != nil || len(es) != 1 || es[0].Key != "oncall" {
		t.Fatalf("review of the team memory: %+v %v", es, err)
	}
}

// testAgentSecretSwap (TestSecretSwapEndToEnd's daemon and fake upstream):
// a hosted agent's run, whose spec grants a secret on the upstream's host,
// calls it through the broker with the placeholder: the upstream receives
// the real value, the run sees only the placeholder.
func testAgentSecretSwap(t *testing.T, d *daemon, c *warden.Client, up *fakeUpstream) {
	ctx := ctxT(t)
	const value = "sk-agent-run-REAL-0123456789abcdef"
	if _, err := c.PutSecret(ctx, "agent-upstream", value); err != nil {
		t.Fatal(err)
	}
	script := `echo "key=$API_KEY"; curl -sS -i --max-time 10 -H "Authorization: Bearer $API_KEY" https://api.example.test/echo`
	createAgent(t, c, map[string]any{"name": "swapper", "command": []string{"/bin/sh", "-c", script},
		"network": map[string]any{"mode": "allowlist", "allow": []map[string]any{{"host": "api.example.test"}}},
		"secrets": []map[string]any{{"secret": "agent-upstream", "hosts": []string{"api.example.test"}, "env_name": "API_KEY"}}})
	r, err := c.RunAgent(ctx, "swapper", nil)
	if err != nil {
		t.Fatal(err)
	}
	r = waitRun(t, c, r.ID, "ended", warden.AgentRun.Ended)
	out, all := runLog(t, c, r.ID)
	if r.State != warden.AgentRunSucceeded {
		t.Fatalf("run %+v:\n%s", r, all)
	}
	if got := up.last("api.example.test"); got != "Bearer "+value {
		t.Errorf("the upstream received %q from the agent's run, want the real secret", got)
	}
	if strings.Contains(all, value) || !strings.Contains(out, "key=warden-ph-") || !strings.Contains(out, "you sent: Bearer warden-ph-") {
		t.Errorf("the run saw:\n%s\nwant only the placeholder", all)
	}
}
