package storetest

import (
	"testing"

	"github.com/warden-sandbox/warden/internal/store"
)

// RunLLMSandboxUsage runs the conformance tests of LLM usage attributed to
// sandboxes (store.LLMUsage.SandboxID, migration 0020) against stores
// returned by open.
func RunLLMSandboxUsage(t *testing.T, open func(t *testing.T) store.UsageStore) {
	s := open(t)
	day := "2026-12-01"
	add := func(u store.LLMUsage) {
		t.Helper()
		u.Day, u.Provider, u.Calls = day, "openai", 1
		if err := s.AddLLMUsage(ctx(t), u); err != nil {
			t.Fatal(err)
		}
	}
	// The same principal, agent, day and model from two sandboxes and
	// from none are three rows; a second call from sb-1 adds to its row.
	add(store.LLMUsage{PrincipalID: "alice", Agent: "bot", Model: "gpt", TokensIn: 10, TokensOut: 1, CostMicros: 5})
	add(store.LLMUsage{PrincipalID: "alice", Agent: "bot", Model: "gpt", SandboxID: "sb-1", TokensIn: 20, TokensOut: 2, CostMicros: 7})
	add(store.LLMUsage{PrincipalID: "alice", Agent: "bot", Model: "gpt", SandboxID: "sb-1", TokensIn: 30, TokensOut: 3, CostMicros: 9})
	add(store.LLMUsage{PrincipalID: "alice", Agent: "bot", Model: "gpt", SandboxID: "sb-2", TokensIn: 40, TokensOut: 4, CostMicros: 11})
	all, err := s.ListLLMUsage(ctx(t), store.LLMUsageFilter{})
	if err != nil || len(all) != 3 || all[0].SandboxID != "" || all[1].SandboxID != "sb-1" || all[1].Calls != 2 ||
		all[1].TokensIn != 50 || all[1].TokensOut != 5 || all[1].CostMicros != 16 || all[2].SandboxID != "sb-2" {
		t.Fatalf("list: %+v %v", all, err)
	}
	rows, err := s.ListLLMUsage(ctx(t), store.LLMUsageFilter{Sandbox: "sb-2"})
	if err != nil || len(rows) != 1 || rows[0].TokensIn != 40 {
		t.Fatalf("list sb-2: %+v %v", rows, err)
	}
	// Budgets sum every row of a principal or agent, whatever the sandbox.
	tok, cost, err := s.SumLLMUsage(ctx(t), store.LLMUsageFilter{Principals: []string{"alice"}, FromDay: day, ToDay: day})
	if err != nil || tok != 11+55+44 || cost != 5+16+11 {
		t.Fatalf("sum alice: %d %d %v", tok, cost, err)
	}
	tok, cost, err = s.SumLLMUsage(ctx(t), store.LLMUsageFilter{Agent: "bot", Sandbox: "sb-1"})
	if err != nil || tok != 55 || cost != 16 {
		t.Fatalf("sum bot in sb-1: %d %d %v", tok, cost, err)
	}
}
