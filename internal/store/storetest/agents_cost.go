package storetest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// RunAgentRunCost checks that a run's LLM usage (calls, tokens, cost) is
// kept by CreateAgentRun and UpdateAgentRun and read back by Get and List.
func RunAgentRunCost(t *testing.T, open func(t *testing.T) store.Store) {
	st := open(t)
	as, ok := st.(store.AgentStore)
	if !ok {
		t.Fatal("the store does not implement store.AgentStore")
	}
	ctx := t.Context()
	at := time.Unix(1700000000, 0).UTC()
	if err := st.CreatePrincipal(ctx, store.Principal{ID: "pr-cost", Kind: store.PrincipalAgent, Name: "cost", CreatedAt: at}); err != nil {
		t.Fatal(err)
	}
	a := store.Agent{ID: "ag-cost", Name: "cost", PrincipalID: "pr-cost", OwnerID: "pr-owner", Version: 1, Spec: json.RawMessage(`{}`), CreatedAt: at}
	if err := as.CreateAgent(ctx, a); err != nil {
		t.Fatal(err)
	}
	r := store.AgentRun{ID: "run-cost", AgentID: a.ID, Version: 1, Trigger: "manual", Input: json.RawMessage(`null`),
		State: store.RunRunning, CreatedAt: at, LLMCalls: 1, TokensIn: 10, TokensOut: 2, CostMicros: 36}
	if err := as.CreateAgentRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := as.UpdateAgentRun(ctx, r.ID, func(x *store.AgentRun) error {
		x.LLMCalls, x.TokensIn, x.TokensOut, x.CostMicros = x.LLMCalls+2, x.TokensIn+200, x.TokensOut+40, x.CostMicros+720
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got, err := as.GetAgentRun(ctx, r.ID)
	if err != nil || got.LLMCalls != 3 || got.TokensIn != 210 || got.TokensOut != 42 || got.CostMicros != 756 {
		t.Fatalf("GetAgentRun = %+v, %v", got, err)
	}
	runs, err := as.ListAgentRuns(ctx, store.AgentRunFilter{AgentID: a.ID})
	if err != nil || len(runs) != 1 || runs[0].CostMicros != 756 || runs[0].LLMCalls != 3 {
		t.Fatalf("ListAgentRuns = %+v, %v", runs, err)
	}
}

// RunAgentCron checks store.AgentCronStore: put, replace, list by agent,
// a missing agent refused, and the states deleted with their agent.
func RunAgentCron(t *testing.T, open func(t *testing.T) store.Store) {
	st := open(t)
	as, ok1 := st.(store.AgentStore)
	cs, ok2 := st.(store.AgentCronStore)
	if !ok1 || !ok2 {
		t.Fatal("the store does not implement store.AgentStore and store.AgentCronStore")
	}
	ctx := t.Context()
	at := time.Unix(1700000000, 0).UTC()
	if err := st.CreatePrincipal(ctx, store.Principal{ID: "pr-cron", Kind: store.PrincipalAgent, Name: "cron", CreatedAt: at}); err != nil {
		t.Fatal(err)
	}
	a := store.Agent{ID: "ag-cron", Name: "cron", PrincipalID: "pr-cron", OwnerID: "pr-owner", Version: 1, Spec: json.RawMessage(`{}`), CreatedAt: at}
	if err := as.CreateAgent(ctx, a); err != nil {
		t.Fatal(err)
	}
	for _, c := range []store.AgentCron{
		{AgentID: a.ID, Index: 1, Schedule: "@hourly", NextAt: at.Add(time.Hour)},
		{AgentID: a.ID, Index: 0, Schedule: "0 9 * * *", NextAt: at.Add(2 * time.Hour)},
		{AgentID: a.ID, Index: 0, Schedule: "0 10 * * *", NextAt: at.Add(3 * time.Hour)}, // replaces
	} {
		if err := cs.PutAgentCron(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := cs.PutAgentCron(ctx, store.AgentCron{AgentID: "ag-missing", Index: 0, Schedule: "x", NextAt: at}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("missing agent: %v, want ErrNotFound", err)
	}
	got, err := cs.ListAgentCron(ctx, a.ID)
	if err != nil || len(got) != 2 || got[0].Index != 0 || got[0].Schedule != "0 10 * * *" || !got[0].NextAt.Equal(at.Add(3*time.Hour)) ||
		got[1].Index != 1 || !got[1].NextAt.Equal(at.Add(time.Hour)) {
		t.Fatalf("ListAgentCron = %+v, %v", got, err)
	}
	if err := as.DeleteAgent(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := cs.ListAgentCron(ctx, a.ID); err != nil || len(got) != 0 {
		t.Fatalf("after the agent's deletion: %+v, %v", got, err)
	}
}
