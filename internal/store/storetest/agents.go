package storetest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// RunAgents runs the conformance tests of store.AgentStore against stores
// made by open, which must also implement it.
func RunAgents(t *testing.T, open func(t *testing.T) store.Store) {
	t.Run("AgentsAndRuns", func(t *testing.T) {
		st := open(t)
		as, ok := st.(store.AgentStore)
		if !ok {
			t.Fatal("the store does not implement store.AgentStore")
		}
		ctx := t.Context()
		at := time.Unix(1700000000, 0).UTC()
		p := store.Principal{ID: "pr-agent1", Kind: store.PrincipalAgent, Name: "a1", CreatedAt: at}
		if err := st.CreatePrincipal(ctx, p); err != nil {
			t.Fatal(err)
		}
		a := store.Agent{ID: "ag-1", Name: "one", PrincipalID: p.ID, OwnerID: "pr-owner", Version: 1,
			Spec: json.RawMessage(`{"v":1}`), WebhookSecret: "s", CreatedAt: at}
		if err := as.CreateAgent(ctx, a); err != nil {
			t.Fatal(err)
		}
		if err := as.CreateAgent(ctx, a); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("duplicate: %v, want ErrConflict", err)
		}
		b := a
		b.ID, b.Name, b.PrincipalID = "ag-2", "two", "pr-missing"
		if err := as.CreateAgent(ctx, b); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("missing principal: %v, want ErrNotFound", err)
		}
		got, err := as.GetAgentByName(ctx, "one")
		if err != nil || got.ID != a.ID || got.Version != 1 || string(got.Spec) != `{"v":1}` || !got.UpdatedAt.Equal(at) {
			t.Fatalf("GetAgentByName = %+v, %v", got, err)
		}
		up, err := as.UpdateAgentSpec(ctx, a.ID, json.RawMessage(`{"v":2}`), "pr-owner", at.Add(time.Hour))
		if err != nil || up.Version != 2 || string(up.Spec) != `{"v":2}` {
			t.Fatalf("UpdateAgentSpec = %+v, %v", up, err)
		}
		vs, err := as.ListAgentVersions(ctx, a.ID)
		if err != nil || len(vs) != 2 || vs[0].Version != 1 || string(vs[1].Spec) != `{"v":2}` {
			t.Fatalf("ListAgentVersions = %+v, %v", vs, err)
		}
		if err := as.SetAgentSandbox(ctx, a.ID, "sb-1"); err != nil {
			t.Fatal(err)
		}
		if got, _ := as.GetAgent(ctx, a.ID); got.SandboxID != "sb-1" {
			t.Fatalf("sandbox %q", got.SandboxID)
		}

		r := store.AgentRun{ID: "run-1", AgentID: a.ID, Version: 2, Trigger: "manual", Input: json.RawMessage(`{"x":1}`),
			State: store.RunQueued, CreatedBy: "pr-owner", CreatedAt: at}
		if err := as.CreateAgentRun(ctx, r); err != nil {
			t.Fatal(err)
		}
		r2 := r
		r2.ID, r2.CreatedAt = "run-2", at.Add(time.Second)
		if err := as.CreateAgentRun(ctx, r2); err != nil {
			t.Fatal(err)
		}
		bad := r
		bad.ID, bad.AgentID = "run-3", "ag-missing"
		if err := as.CreateAgentRun(ctx, bad); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("run of a missing agent: %v, want ErrNotFound", err)
		}
		code := 3
		done, err := as.UpdateAgentRun(ctx, "run-1", func(x *store.AgentRun) error {
			x.State, x.Reason, x.ExitCode, x.EndedAt = store.RunFailed, "exit 3", &code, at.Add(time.Minute)
			return nil
		})
		if err != nil || done.State != store.RunFailed || *done.ExitCode != 3 {
			t.Fatalf("UpdateAgentRun = %+v, %v", done, err)
		}
		if _, err := as.UpdateAgentRun(ctx, "run-1", func(x *store.AgentRun) error { x.State = "bogus"; return nil }); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("bogus state: %v, want ErrInvalid", err)
		}
		got1, err := as.GetAgentRun(ctx, "run-1")
		if err != nil || got1.State != store.RunFailed || got1.ExitCode == nil || *got1.ExitCode != 3 || !got1.EndedAt.Equal(at.Add(time.Minute)) {
			t.Fatalf("GetAgentRun = %+v, %v", got1, err)
		}
		list, err := as.ListAgentRuns(ctx, store.AgentRunFilter{AgentID: a.ID})
		if err != nil || len(list) != 2 || list[0].ID != "run-2" {
			t.Fatalf("ListAgentRuns = %+v, %v", list, err)
		}
		list, err = as.ListAgentRuns(ctx, store.AgentRunFilter{States: []string{store.RunQueued, store.RunRunning}})
		if err != nil || len(list) != 1 || list[0].ID != "run-2" {
			t.Fatalf("ListAgentRuns(queued) = %+v, %v", list, err)
		}
		if err := as.DeleteAgent(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := as.GetAgentRun(ctx, "run-2"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("run after agent delete: %v, want ErrNotFound", err)
		}
		if err := as.DeleteAgent(ctx, a.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("second delete: %v", err)
		}
	})
}
