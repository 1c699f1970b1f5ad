package agents

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/network"
	"github.com/warden-sandbox/warden/internal/store"
)

// TestRunEnvAndNetwork: with the daemon's route (LocalURL) a run sees
// Warden at warden.internal with the gateways' SDK variables and its MCP
// server, and a spec without a network gets an allowlist with no rules;
// without the route WARDEN_URL is the public URL and the network is the
// spec's. WARDEN_* cannot be overridden by the spec's env; OPENAI_* can.
func TestRunEnvAndNetwork(t *testing.T) {
	now := time.Now()
	s, _ := testService(t, &now)
	s.cfg.PublicURL = "http://10.0.0.1:7000"
	a := store.Agent{Name: "cw"}
	r := store.AgentRun{ID: "run-1", Trigger: TriggerSlack, Input: json.RawMessage(`{"x":1}`)}
	spec := Spec{Name: "cw", Command: []string{"x"}, MCPServers: []string{"tools", "more"},
		Env: map[string]string{"WARDEN_API_KEY": "stolen", "OPENAI_API_KEY": "mine", "A": "b"}}
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}

	env := s.runEnv(a, spec, r, "wdn_key", "sb-1")
	if env["WARDEN_URL"] != "http://10.0.0.1:7000" || env["OPENAI_BASE_URL"] != "" || env["WARDEN_API_KEY"] != "wdn_key" {
		t.Errorf("no route: %v", env)
	}
	if p := s.runNetwork(spec); p != nil {
		t.Errorf("no route: network %+v, want the spec's (none)", p)
	}

	s.cfg.LocalURL, s.cfg.OpenAIProvider, s.cfg.AnthropicProvider = "http://"+network.LocalName, "openai", "claude"
	env = s.runEnv(a, spec, r, "wdn_key", "sb-1")
	for k, want := range map[string]string{
		"WARDEN_URL":         "http://warden.internal",
		"WARDEN_API_KEY":     "wdn_key",
		"WARDEN_SANDBOX_ID":  "sb-1",
		"WARDEN_RUN_ID":      "run-1",
		"WARDEN_RUN_INPUT":   `{"x":1}`,
		"WARDEN_MCP_URL":     "http://warden.internal/mcp/v/tools",
		"WARDEN_MCP_SERVERS": "tools,more",
		"OPENAI_BASE_URL":    "http://warden.internal/llm/openai/v1",
		"OPENAI_API_KEY":     "mine",
		"ANTHROPIC_BASE_URL": "http://warden.internal/llm/claude",
		"ANTHROPIC_API_KEY":  "wdn_key",
		"A":                  "b",
	} {
		if env[k] != want {
			t.Errorf("%s = %q, want %q", k, env[k], want)
		}
	}
	if p := s.runNetwork(spec); p == nil || p.Mode != network.ModeAllowlist || len(p.Allow) != 0 {
		t.Errorf("route, no network in the spec: %+v, want an allowlist with no rules", p)
	}
	spec.Network = &network.Policy{Mode: network.ModeOpen}
	if p := s.runNetwork(spec); p == nil || p.Mode != network.ModeOpen {
		t.Errorf("route, open spec: %+v", p)
	}
}

// TestLLMBudgetSpec: llm_budget as an object is checked and becomes the
// gateway's budgets scoped to the agent; the older string form still
// parses (recorded only).
func TestLLMBudgetSpec(t *testing.T) {
	spec, err := ParseSpec([]byte(`{"name":"cw","command":["x"],"llm_budget":{"tokens":500,"usd":1.5}}`))
	if err != nil {
		t.Fatal(err)
	}
	bs := spec.LLMBudget.gatewayBudgets("cw")
	if len(bs) != 2 || bs[0].Name != "agent:cw" || bs[0].Agent != "cw" || bs[0].Tokens != 500 || bs[0].Period != "day" ||
		bs[1].Name != "agent:cw:usd" || bs[1].USD != 1.5 || bs[1].Tokens != 0 {
		t.Errorf("budgets: %+v", bs)
	}
	old, err := ParseSpec([]byte(`{"name":"cw","command":["x"],"llm_budget":"team-monthly"}`))
	if err != nil || old.LLMBudget == nil || old.LLMBudget.Ref != "team-monthly" || old.LLMBudget.gatewayBudgets("cw") != nil {
		t.Fatalf("string form: %+v %v", old.LLMBudget, err)
	}
	if b, _ := json.Marshal(old); !strings.Contains(string(b), `"llm_budget":"team-monthly"`) {
		t.Errorf("string form round trip: %s", b)
	}
	for _, bad := range []string{`{"period":"week","tokens":1}`, `{}`, `{"tokens":-1}`, `{"tokns":5}`} {
		if _, err := ParseSpec([]byte(`{"name":"cw","command":["x"],"llm_budget":` + bad + `}`)); err == nil {
			t.Errorf("llm_budget %s accepted", bad)
		}
	}
	s, st := testService(t, new(time.Time))
	addAgent(t, st, "cw", spec)
	got, err := s.LLMBudgets(t.Context(), "cw")
	if err != nil || len(got) != 2 {
		t.Errorf("LLMBudgets(cw): %+v %v", got, err)
	}
	if got, err := s.LLMBudgets(t.Context(), "nobody"); err != nil || got != nil {
		t.Errorf("LLMBudgets(nobody): %+v %v", got, err)
	}
}

// TestAddRunUsage: calls made with a live run's key add up on the run,
// still for a while after it ended; other keys count for no run.
func TestAddRunUsage(t *testing.T) {
	now := time.Now()
	s, st := testService(t, &now)
	a := addAgent(t, st, "cw", Spec{Name: "cw", Command: []string{"x"}})
	r := store.AgentRun{ID: "run-1", AgentID: a.ID, Version: 1, Trigger: TriggerManual, Input: json.RawMessage(`null`),
		State: store.RunRunning, KeyID: "key-1", CreatedAt: now}
	if err := st.CreateAgentRun(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	s.active[r.ID] = &activeRun{agentID: a.ID, keyID: "key-1", sandboxID: "sb-1"}
	if id, ok := s.RunForSandbox("sb-1"); !ok || id != r.ID {
		t.Errorf("RunForSandbox(sb-1) = %q %v", id, ok)
	}
	if _, ok := s.RunForSandbox("sb-other"); ok {
		t.Error("RunForSandbox(sb-other) found a run")
	}
	s.AddRunUsage(t.Context(), "key-1", 1, 100, 20, 360)
	s.AddRunUsage(t.Context(), "key-other", 1, 1000, 1000, 1000)
	// The run ends (as execute's end does): its key still counts for a while.
	delete(s.active, r.ID)
	s.endedKeys["key-1"] = endedKey{run: r.ID, at: time.Now()}
	s.AddRunUsage(t.Context(), "key-1", 1, 100, 20, 360)
	got, err := st.GetAgentRun(t.Context(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.LLMCalls != 2 || got.TokensIn != 200 || got.TokensOut != 40 || got.CostMicros != 720 {
		t.Errorf("run usage: %+v", got)
	}
	if _, ok := s.RunForSandbox("sb-1"); ok {
		t.Error("an ended run's sandbox is still served")
	}
	s.endedKeys["key-1"] = endedKey{run: r.ID, at: time.Now().Add(-2 * usageGrace)}
	s.AddRunUsage(t.Context(), "key-1", 1, 100, 20, 360)
	if got, _ := st.GetAgentRun(t.Context(), r.ID); got.LLMCalls != 2 {
		t.Errorf("usage counted past the grace: %+v", got)
	}
}
