package memory_test

import (
	"context"
	"strings"
	"testing"

	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/memory"
)

// TestTeamMemory: two agents naming one team read and write one shared
// namespace through the tools' scope "team", each write attributed to its
// agent and run, while their own memories stay apart; an agent without a
// team is refused; the guard screens team writes too.
func TestTeamMemory(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	teams := map[string]string{"triage": "ops", "deployer": "ops"}
	e.svc.SetTeamLookup(func(_ context.Context, agent string) (string, bool) {
		team, ok := teams[agent]
		return team, ok
	})
	e.svc.SetRunLookup(func(_ context.Context, key string) (string, bool) { return "run_" + key, true })

	call := func(agentName, tool string, args map[string]any) (map[string]any, error) {
		out, err := e.svc.CallTool(ctx, agent(agentName), tool, args)
		if err != nil {
			return nil, err
		}
		m, _ := out.(map[string]any)
		return m, nil
	}
	if _, err := call("triage", memory.ToolRemember, map[string]any{"key": "oncall", "text": "bob is on call this week", "scope": "team"}); err != nil {
		t.Fatalf("team write: %v", err)
	}
	if _, err := call("triage", memory.ToolRemember, map[string]any{"key": "mine", "text": "triage's own note"}); err != nil {
		t.Fatalf("own write: %v", err)
	}
	// The other agent of the team reads it, and sees who wrote it.
	out, err := call("deployer", memory.ToolRecall, map[string]any{"key": "oncall", "scope": "team"})
	if err != nil {
		t.Fatalf("team read: %v", err)
	}
	es := out["entries"].([]memory.ToolEntry)
	if len(es) != 1 || es[0].Text != "bob is on call this week" || es[0].Agent != "triage" || es[0].RunID != "run_key_triage" ||
		!strings.Contains(out["note"].(string), "team") {
		t.Fatalf("team recall = %+v", out)
	}
	// It writes a new version of the same key, attributed to itself.
	if _, err := call("deployer", memory.ToolRemember, map[string]any{"key": "oncall", "text": "carol is on call now", "scope": "team"}); err != nil {
		t.Fatal(err)
	}
	h, err := e.svc.History(ctx, memory.TeamNamespace("ops"), "oncall")
	if err != nil || len(h) != 2 || h[0].Agent != "triage" || h[1].Agent != "deployer" || h[1].Principal != "prn_deployer" ||
		h[1].RunID != "run_key_deployer" || h[1].Version != 2 {
		t.Fatalf("team history = %+v, %v", h, err)
	}
	// Own memories stay apart: deployer does not see triage's note, and
	// the team key is not in either agent's own memory.
	out, err = call("deployer", memory.ToolList, map[string]any{})
	if err != nil || len(out["entries"].([]memory.ToolEntry)) != 0 {
		t.Fatalf("deployer's own memory = %+v, %v", out, err)
	}
	out, err = call("triage", memory.ToolList, map[string]any{"scope": "agent"})
	if es := out["entries"].([]memory.ToolEntry); err != nil || len(es) != 1 || es[0].Key != "mine" {
		t.Fatalf("triage's own memory = %+v, %v", out, err)
	}
	// An agent with no team is refused scope team; a bad scope is refused.
	if _, err := call("loner", memory.ToolRecall, map[string]any{"query": "call", "scope": "team"}); err == nil ||
		!strings.Contains(err.Error(), "no team memory") {
		t.Fatalf("team read without a team: %v", err)
	}
	if _, err := call("triage", memory.ToolList, map[string]any{"scope": "everyone"}); err == nil {
		t.Fatal("scope everyone accepted")
	}
	// Forget in the team memory leaves a tombstone attributed to the agent.
	if _, err := call("triage", memory.ToolForget, map[string]any{"key": "oncall", "scope": "team"}); err != nil {
		t.Fatal(err)
	}
	out, err = call("deployer", memory.ToolList, map[string]any{"scope": "team"})
	if err != nil || len(out["entries"].([]memory.ToolEntry)) != 0 {
		t.Fatalf("team list after forget = %+v, %v", out, err)
	}
	// The guard screens team writes like any other.
	pol := govern.Policy{ID: "no-secrets-in-memory", Scope: govern.Scope{Kind: govern.ScopeInstallation},
		Guard: &govern.Guard{Detectors: []string{govern.DetectorSecrets}, Targets: []string{govern.GuardTargetMemory}, Action: govern.GuardBlock}}
	if _, err := e.eng.CreatePolicy(ctx, pol, "test"); err != nil {
		t.Fatal(err)
	}
	_, err = call("triage", memory.ToolRemember, map[string]any{"key": "creds", "text": "token " + testSecret, "scope": "team"})
	if kind, _ := errkind.Of(err); kind != errkind.Forbidden {
		t.Fatalf("team write of a secret: %v", err)
	}
	if _, err := e.svc.Get(ctx, memory.TeamNamespace("ops"), "creds"); err == nil {
		t.Fatal("a blocked team write was stored")
	}
	if !memory.ValidNamespace(memory.TeamNamespace("ops")) || !memory.IsTeamNamespace("team.ops") || memory.IsTeamNamespace("ops") {
		t.Fatal("team namespaces")
	}
}
