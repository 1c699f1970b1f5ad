package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/store"
)

// RunGovern runs the conformance tests of store.GovernStore (policies,
// their history, approvals) against stores returned by open.
func RunGovern(t *testing.T, open func(t *testing.T) store.GovernStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.GovernStore)
	}{
		{"PolicyVersions", testPolicyVersions},
		{"PolicyConcurrentUpdates", testPolicyConcurrentUpdates},
		{"Approvals", testApprovals},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open(t)) })
	}
}

func testPolicyVersions(t *testing.T, s store.GovernStore) {
	p := store.Policy{ID: "p1", Name: "first", ScopeKind: "installation", Document: json.RawMessage(`{"rules":[]}`),
		CreatedAt: base, CreatedBy: "alice", UpdatedAt: base, UpdatedBy: "alice", Version: 7}
	got, err := s.CreatePolicy(ctx(t), p)
	if err != nil || got.Version != 1 {
		t.Fatalf("create: %+v %v", got, err)
	}
	if _, err := s.CreatePolicy(ctx(t), p); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate create: %v", err)
	}
	if _, err := s.CreatePolicy(ctx(t), store.Policy{ID: "bad", CreatedAt: base, UpdatedAt: base, Document: json.RawMessage(`{`)}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("bad document: %v", err)
	}
	later := base.Add(time.Hour)
	up, err := s.UpdatePolicy(ctx(t), "p1", func(p *store.Policy) error {
		p.Name, p.Document, p.UpdatedAt, p.UpdatedBy = "second", json.RawMessage(`{"rules":[{"id":"r"}]}`), later, "bob"
		return nil
	})
	if err != nil || up.Version != 2 || up.CreatedBy != "alice" || up.UpdatedBy != "bob" {
		t.Fatalf("update: %+v %v", up, err)
	}
	if _, err := s.UpdatePolicy(ctx(t), "p1", func(p *store.Policy) error { p.Version = 9; return nil }); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("update changing the version: %v", err)
	}
	boom := errors.New("boom")
	if _, err := s.UpdatePolicy(ctx(t), "p1", func(*store.Policy) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("update fn error: %v", err)
	}
	if _, err := s.UpdatePolicy(ctx(t), "nope", func(*store.Policy) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update missing: %v", err)
	}
	cur, err := s.GetPolicy(ctx(t), "p1")
	if err != nil || cur.Version != 2 || cur.Name != "second" || !cur.UpdatedAt.Equal(later) || !cur.CreatedAt.Equal(base) {
		t.Fatalf("get: %+v %v", cur, err)
	}
	v1, err := s.GetPolicyVersion(ctx(t), "p1", 1)
	if err != nil || v1.Name != "first" || string(v1.Document) != `{"rules":[]}` || !v1.CreatedAt.Equal(base) || v1.UpdatedBy != "alice" {
		t.Fatalf("version 1: %+v %v", v1, err)
	}
	if _, err := s.GetPolicyVersion(ctx(t), "p1", 3); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("version 3: %v", err)
	}
	if _, err := s.CreatePolicy(ctx(t), store.Policy{ID: "p0", ScopeKind: "group", ScopeID: "dev", Document: json.RawMessage(`{}`),
		CreatedAt: base, UpdatedAt: base}); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListPolicies(ctx(t))
	if err != nil || len(list) != 2 || list[0].ID != "p0" || list[1].Version != 2 {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := s.DeletePolicy(ctx(t), "p1", later); err != nil {
		t.Fatal(err)
	}
	if err := s.DeletePolicy(ctx(t), "p1", later); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := s.GetPolicy(ctx(t), "p1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
	v2, err := s.GetPolicyVersion(ctx(t), "p1", 2)
	if err != nil || v2.Name != "second" || !v2.DeletedAt.Equal(later) {
		t.Fatalf("history of a deleted policy: %+v %v", v2, err)
	}
	if _, err := s.CreatePolicy(ctx(t), p); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("reusing the id of a deleted policy: %v", err)
	}
}

func testPolicyConcurrentUpdates(t *testing.T, s store.GovernStore) {
	if _, err := s.CreatePolicy(ctx(t), store.Policy{ID: "p", ScopeKind: "installation", Document: json.RawMessage(`{}`),
		CreatedAt: base, UpdatedAt: base}); err != nil {
		t.Fatal(err)
	}
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := s.UpdatePolicy(ctx(t), "p", func(p *store.Policy) error {
				p.UpdatedBy = fmt.Sprint(i)
				return nil
			}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	p, err := s.GetPolicy(ctx(t), "p")
	if err != nil || p.Version != n+1 {
		t.Fatalf("after %d updates: version %d, %v", n, p.Version, err)
	}
	for v := int64(1); v <= n+1; v++ {
		if _, err := s.GetPolicyVersion(ctx(t), "p", v); err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
	}
}

func testApprovals(t *testing.T, s store.GovernStore) {
	mk := func(id, digest, principal string, at time.Time) store.Approval {
		return store.Approval{ID: id, Digest: digest, PrincipalID: principal, OwnerID: "alice", Kind: "exec",
			Target: "sb-1", RuleID: "r", PolicyID: "p", PolicyVersion: 2, Approvers: []string{"group:ops"},
			Message: "m", Action: json.RawMessage(`{"kind":"exec"}`), State: "pending", CreatedAt: at, ExpiresAt: at.Add(time.Hour)}
	}
	a1 := mk("a1", "d1", "bot", base)
	for _, a := range []store.Approval{a1, mk("a2", "d1", "bot", base.Add(time.Second)), mk("a3", "d2", "bot", base.Add(2*time.Second)),
		mk("a4", "d1", "other", base.Add(3*time.Second))} {
		if err := s.CreateApproval(ctx(t), a); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CreateApproval(ctx(t), a1); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate: %v", err)
	}
	bad := mk("a5", "d1", "bot", base)
	bad.State = "maybe"
	if err := s.CreateApproval(ctx(t), bad); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("bad state: %v", err)
	}
	got, err := s.GetApproval(ctx(t), "a1")
	if err != nil || got.Digest != "d1" || !slices.Equal(got.Approvers, []string{"group:ops"}) || !got.ExpiresAt.Equal(base.Add(time.Hour)) ||
		string(got.Action) != `{"kind":"exec"}` || got.PolicyVersion != 2 || !got.DecidedAt.IsZero() {
		t.Fatalf("get: %+v %v", got, err)
	}
	up, err := s.UpdateApproval(ctx(t), "a1", func(a *store.Approval) error {
		if a.State != "pending" {
			return store.ErrConflict
		}
		a.State, a.DecidedBy, a.DecidedAt = "approved", "carol", base.Add(time.Minute)
		return nil
	})
	if err != nil || up.State != "approved" {
		t.Fatalf("approve: %+v %v", up, err)
	}
	if _, err := s.UpdateApproval(ctx(t), "a1", func(a *store.Approval) error {
		if a.State != "pending" {
			return fmt.Errorf("is %s: %w", a.State, store.ErrConflict)
		}
		return nil
	}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("conditional update: %v", err)
	}
	if _, err := s.UpdateApproval(ctx(t), "zz", func(*store.Approval) error { return nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update missing: %v", err)
	}
	list, err := s.ListApprovals(ctx(t), store.ApprovalFilter{Digest: "d1", PrincipalID: "bot"})
	if err != nil || len(list) != 2 || list[0].ID != "a2" || list[1].ID != "a1" {
		t.Fatalf("by digest: %+v %v", list, err)
	}
	list, err = s.ListApprovals(ctx(t), store.ApprovalFilter{States: []string{"pending"}, Limit: 2})
	if err != nil || len(list) != 2 || list[0].ID != "a4" || list[1].ID != "a3" {
		t.Fatalf("pending, limit 2: %+v %v", list, err)
	}
	list, err = s.ListApprovals(ctx(t), store.ApprovalFilter{States: []string{"approved", "rejected"}})
	if err != nil || len(list) != 1 || list[0].ID != "a1" || list[0].DecidedBy != "carol" {
		t.Fatalf("approved: %+v %v", list, err)
	}
}
