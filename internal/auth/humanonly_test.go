package auth_test

import (
	"context"
	"errors"
	"testing"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/store"
)

// TestHumanOnlyScopes: policies:write and approvals:decide are never held
// by an agent, not even through admin, and no key for an agent carries them.
func TestHumanOnlyScopes(t *testing.T) {
	agentAdmin := auth.Identity{Principal: store.Principal{ID: "pr-a", Kind: store.PrincipalAgent}, Scopes: []auth.Scope{auth.ScopeAdmin}}
	userAdmin := auth.Identity{Principal: store.Principal{ID: "pr-u", Kind: store.PrincipalUser}, Scopes: []auth.Scope{auth.ScopeAdmin}}
	for _, s := range []auth.Scope{auth.ScopePoliciesWrite, auth.ScopeApprovalsDecide} {
		if !s.HumanOnly() || agentAdmin.Has(s) || !userAdmin.Has(s) {
			t.Errorf("%s: human-only %v, agent admin has it %v, user admin %v", s, s.HumanOnly(), agentAdmin.Has(s), userAdmin.Has(s))
		}
	}
	if !agentAdmin.Has(auth.ScopePoliciesRead) || auth.ScopePoliciesRead.HumanOnly() {
		t.Error("policies:read should be an ordinary scope")
	}

	ctx := context.Background()
	a := auth.New(openStore(t))
	agent, err := a.CreatePrincipal(ctx, store.PrincipalAgent, "bot", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.IssueKey(ctx, agent.ID, "k", []auth.Scope{auth.ScopeSandboxesExec, auth.ScopeApprovalsDecide}); !errors.Is(err, auth.ErrHumanOnlyScope) {
		t.Errorf("agent key with approvals:decide: %v, want ErrHumanOnlyScope", err)
	}
	user, err := a.CreatePrincipal(ctx, store.PrincipalUser, "ops", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.IssueKey(ctx, user.ID, "k", []auth.Scope{auth.ScopeApprovalsDecide}); err != nil {
		t.Errorf("user key with approvals:decide: %v", err)
	}
}
