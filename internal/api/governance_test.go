package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/store"
	warden "github.com/warden-sandbox/warden/sdk/go"
)

// govServer is a Server over the package's stack with a governance engine
// (the shared env's server has none, so its routes answer 503), and its
// own HTTP server.
func govServer(t *testing.T) (*govern.Engine, *httptest.Server) {
	t.Helper()
	g := govern.New(govern.Config{Store: env.st, Audit: env.alog})
	srv, err := New(Config{Manager: env.mgr, Store: env.st, Auth: env.auth, Audit: env.audit,
		PresignKey: []byte("test presign key"), Version: "test", Govern: g})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { hs.Close(); g.Close() })
	return g, hs
}

func govClient(t *testing.T, hs *httptest.Server, key string) *warden.Client {
	t.Helper()
	c, err := warden.New(warden.WithBaseURL(hs.URL), warden.WithAPIKey(key), warden.WithRetry(warden.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// govUser makes a user principal and a key for it with the scopes.
func govUser(t *testing.T, name string, scopes ...auth.Scope) (store.Principal, string) {
	t.Helper()
	p, err := env.auth.CreatePrincipal(ctxT(t, 10*time.Second), store.PrincipalUser, name+"-"+uniq(), "")
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := env.auth.IssueKey(ctxT(t, 10*time.Second), p.ID, name, scopes)
	if err != nil {
		t.Fatal(err)
	}
	return p, key
}

func TestGovernPolicyRoutes(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	_, hs := govServer(t)
	admin := govClient(t, hs, env.adminKey)
	id := "p-" + uniq()
	draft := warden.PolicyWrite{ID: id, Name: "no rm", Scope: warden.PolicyScope{Kind: "installation"},
		Rules: []warden.Rule{{ID: "no-rm", Kinds: []string{"exec"}, When: `exec.cmd == "rm"`, Outcome: "deny", Message: "no rm"}}}

	p, err := admin.CreatePolicy(ctx, draft)
	if err != nil {
		t.Fatal(err)
	}
	if p.Version != 1 || p.ID != id || len(p.Rules) != 1 || p.CreatedBy == "" {
		t.Fatalf("created %+v, want version 1 with one rule and its author", p)
	}
	_, err = admin.CreatePolicy(ctx, draft)
	apiErr(t, err, http.StatusConflict, "conflict")

	// A condition that does not compile is refused at write time, with
	// the rule, line and column.
	bad := draft
	bad.ID = "bad-" + uniq()
	bad.Rules = []warden.Rule{{ID: "typo", Kinds: []string{"exec"}, When: "exec.cmd == \"x\" &&\n  exec.comand == \"y\"", Outcome: "deny"}}
	_, err = admin.CreatePolicy(ctx, bad)
	apiErr(t, err, http.StatusUnprocessableEntity, "validation_failed")
	if msg := err.Error(); !strings.Contains(msg, "rule typo") || !strings.Contains(msg, "line 2, column") || !strings.Contains(msg, "comand") {
		t.Errorf("bad CEL error %q does not name the rule, line 2 and the column", msg)
	}
	if _, err := admin.GetPolicy(ctx, bad.ID, 0); err == nil {
		t.Error("a policy that does not compile was stored")
	}

	list, err := admin.ListPolicies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, q := range list {
		found = found || q.ID == id
	}
	if !found {
		t.Fatalf("list %+v lacks %s", list, id)
	}

	draft.Rules[0].When = `exec.cmd == "rm" || exec.cmd == "shred"`
	p2, err := admin.UpdatePolicy(ctx, id, draft)
	if err != nil {
		t.Fatal(err)
	}
	if p2.Version != 2 {
		t.Fatalf("update gave version %d, want 2", p2.Version)
	}
	other := draft
	other.ID = "someone-else"
	_, err = admin.UpdatePolicy(ctx, id, other)
	apiErr(t, err, http.StatusUnprocessableEntity, "validation_failed")
	v1, err := admin.GetPolicy(ctx, id, 1)
	if err != nil {
		t.Fatal(err)
	}
	if v1.Version != 1 || v1.Rules[0].When != `exec.cmd == "rm"` {
		t.Fatalf("version 1 is %+v", v1)
	}
	_, err = admin.GetPolicy(ctx, id, 9)
	apiErr(t, err, http.StatusNotFound, "not_found")

	if err := admin.DeletePolicy(ctx, id); err != nil {
		t.Fatal(err)
	}
	_, err = admin.GetPolicy(ctx, id, 0)
	apiErr(t, err, http.StatusNotFound, "not_found")
	if _, err := admin.GetPolicy(ctx, id, 2); err != nil {
		t.Errorf("version 2 of the deleted policy: %v", err)
	}
	apiErr(t, admin.DeletePolicy(ctx, id), http.StatusNotFound, "not_found")

	// Each change is audited.
	for _, action := range []string{"policy.create", "policy.update", "policy.delete"} {
		evs, err := env.st.ListAudit(ctx, store.AuditFilter{Target: id, Action: action, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			t.Errorf("no %s event for %s", action, id)
		}
	}
}

func TestGovernScopes(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	_, hs := govServer(t)
	draft := warden.PolicyWrite{ID: "s-" + uniq(), Scope: warden.PolicyScope{Kind: "installation"}}

	// Agents hold sandbox scopes only: no policies, no approvals.
	agent := govClient(t, hs, env.aKey)
	_, err := agent.CreatePolicy(ctx, draft)
	apiErr(t, err, http.StatusForbidden, "forbidden")
	_, err = agent.ListApprovals(ctx, warden.ApprovalQuery{})
	apiErr(t, err, http.StatusForbidden, "forbidden")

	// No key for an agent carries policies:write or approvals:decide.
	for _, sc := range []string{"policies:write", "approvals:decide"} {
		_, err = env.admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: env.aID, Scopes: []string{sc}})
		apiErr(t, err, http.StatusForbidden, "forbidden")
	}
	// Not even through admin.
	k, err := env.admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: env.bID, Name: "agent-admin", Scopes: []string{"admin"}})
	if err != nil {
		t.Fatal(err)
	}
	agentAdmin := govClient(t, hs, k.Key)
	_, err = agentAdmin.CreatePolicy(ctx, draft)
	apiErr(t, err, http.StatusForbidden, "forbidden")
	_, err = agentAdmin.ListApprovals(ctx, warden.ApprovalQuery{})
	apiErr(t, err, http.StatusForbidden, "forbidden")
	if _, err := agentAdmin.ListPolicies(ctx); err != nil {
		t.Errorf("an agent with admin may read policies: %v", err)
	}

	// A dry run shows audit events: policies:read alone is not enough.
	_, reader := govUser(t, "reader", auth.ScopePoliciesRead)
	_, err = govClient(t, hs, reader).TestPolicy(ctx, warden.PolicyTestRequest{Policy: draft, Limit: 10})
	apiErr(t, err, http.StatusForbidden, "forbidden")
}

func TestGovernPolicyTest(t *testing.T) {
	ctx := ctxT(t, 120*time.Second)
	_, hs := govServer(t)
	marker := "gov-" + uniq()
	// Recorded history: a few execs through the shared server.
	for range 3 {
		if _, err := env.a.Exec(ctx, env.sbA, warden.ExecRequest{Cmd: []string{"echo", marker}}, warden.ExecIO{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.a.Exec(ctx, env.sbA, warden.ExecRequest{Cmd: []string{"true"}}, warden.ExecIO{}); err != nil {
		t.Fatal(err)
	}
	draft := warden.PolicyWrite{ID: "t-" + uniq(), Scope: warden.PolicyScope{Kind: "principal", ID: env.aID},
		Rules: []warden.Rule{{ID: "no-marker", Kinds: []string{"exec"}, When: `exec.args.exists(a, a == "` + marker + `")`,
			Outcome: "deny", Message: "marked"}}}
	admin := govClient(t, hs, env.adminKey)
	res, err := admin.TestPolicy(ctx, warden.PolicyTestRequest{Policy: draft, Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	if res.Counts["deny"] != 3 || res.ByRule["no-marker"] != 3 {
		t.Fatalf("dry run counts %v by rule %v, want 3 denials by no-marker", res.Counts, res.ByRule)
	}
	if res.Counts["allow"] < 1 {
		t.Errorf("dry run counts %v: the `true` exec should be allowed", res.Counts)
	}
	for _, r := range res.Results {
		if r.Outcome != "deny" || r.RuleID != "no-marker" || r.Kind != "exec" || r.PrincipalID != env.aID {
			t.Errorf("result %+v", r)
		}
	}
	if res.Events > 50 || res.ToSeq < res.FromSeq {
		t.Errorf("read %d events, seq %d to %d", res.Events, res.FromSeq, res.ToSeq)
	}
	// A time range: since a minute ago covers them too.
	since := time.Now().Add(-time.Minute)
	res2, err := admin.TestPolicy(ctx, warden.PolicyTestRequest{Policy: draft, Since: &since})
	if err != nil {
		t.Fatal(err)
	}
	if res2.Counts["deny"] != 3 {
		t.Errorf("since-range dry run counts %v, want 3 denials", res2.Counts)
	}
	future := time.Now().Add(time.Hour)
	res3, err := admin.TestPolicy(ctx, warden.PolicyTestRequest{Policy: draft, Since: &future})
	if err != nil {
		t.Fatal(err)
	}
	if res3.Events != 0 {
		t.Errorf("a range in the future read %d events", res3.Events)
	}
	// Nothing was stored.
	if _, err := admin.GetPolicy(ctx, draft.ID, 0); err == nil {
		t.Error("the dry run stored its draft")
	}
	// A bad draft is a 422 with its line and column.
	draft.Rules[0].When = "exec.nosuch"
	_, err = admin.TestPolicy(ctx, warden.PolicyTestRequest{Policy: draft})
	apiErr(t, err, http.StatusUnprocessableEntity, "validation_failed")
	if !strings.Contains(err.Error(), "line 1, column") {
		t.Errorf("error %q lacks the line and column", err)
	}
}

func TestGovernApprovals(t *testing.T) {
	ctx := ctxT(t, 60*time.Second)
	g, hs := govServer(t)
	requester, reqKey := govUser(t, "requester", auth.ScopeApprovalsDecide, auth.ScopeSandboxesExec)
	_, opsKey := govUser(t, "ops", auth.ScopeApprovalsDecide)
	ops := govClient(t, hs, opsKey)
	self := govClient(t, hs, reqKey)

	admin := govClient(t, hs, env.adminKey)
	pid := "a-" + uniq()
	if _, err := admin.CreatePolicy(ctx, warden.PolicyWrite{ID: pid, Scope: warden.PolicyScope{Kind: "principal", ID: requester.ID},
		Rules: []warden.Rule{{ID: "deploys", Kinds: []string{"exec"}, When: `exec.cmd == "deploy"`, Outcome: "require_approval", Message: "deploys need ops"}}}); err != nil {
		t.Fatal(err)
	}
	// With no door wired yet, the engine asks for the approvals directly.
	held := func(arg string) string {
		t.Helper()
		a := &govern.Action{Kind: govern.KindExec, Surface: govern.SurfaceAPI,
			Principal: govern.Principal{ID: requester.ID, Kind: requester.Kind},
			SandboxID: "sb-x", Exec: govern.NewExec([]string{"deploy", arg}, "/", "", nil)}
		d, err := g.Decide(ctx, a)
		if err != nil || d.Outcome != govern.RequireApproval || d.ApprovalID == "" {
			t.Fatalf("decide: %+v, %v; want require_approval", d, err)
		}
		return d.ApprovalID
	}
	first, second := held("prod"), held("staging")

	pending, err := ops.ListApprovals(ctx, warden.ApprovalQuery{State: "pending", Principal: requester.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 2 {
		t.Fatalf("pending approvals %+v, want 2", pending)
	}
	got, err := ops.GetApproval(ctx, first)
	if err != nil || got.State != "pending" || got.RuleID != "deploys" || got.PolicyID != pid || got.Principal != requester.ID {
		t.Fatalf("get approval: %+v, %v", got, err)
	}

	// The requester may not decide its own request.
	_, err = self.Approve(ctx, first, "")
	apiErr(t, err, http.StatusForbidden, "forbidden")
	evs, err := env.st.ListAudit(ctx, store.AuditFilter{Target: first, Action: "approval.decide", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Outcome != "denied" || evs[0].PrincipalID != requester.ID {
		t.Errorf("self-approval audit events %+v, want one denial", evs)
	}

	ap, err := ops.Approve(ctx, first, "looks fine")
	if err != nil || ap.State != "approved" || ap.Reason != "looks fine" || ap.DecidedBy == "" {
		t.Fatalf("approve: %+v, %v", ap, err)
	}
	_, err = ops.Approve(ctx, first, "")
	apiErr(t, err, http.StatusConflict, "conflict")
	rj, err := ops.Reject(ctx, second, "not today")
	if err != nil || rj.State != "rejected" {
		t.Fatalf("reject: %+v, %v", rj, err)
	}
	_, err = ops.GetApproval(ctx, "apr_nosuch")
	apiErr(t, err, http.StatusNotFound, "not_found")

	// The approved action passes once; the rejected one is refused.
	a := &govern.Action{Kind: govern.KindExec, Surface: govern.SurfaceAPI,
		Principal: govern.Principal{ID: requester.ID, Kind: requester.Kind},
		SandboxID: "sb-x", Exec: govern.NewExec([]string{"deploy", "prod"}, "/", "", nil)}
	if d, err := g.Decide(ctx, a); err != nil || d.Outcome != govern.Allow || d.ApprovalID != first {
		t.Errorf("approved action: %+v, %v", d, err)
	}
	a.Exec = govern.NewExec([]string{"deploy", "staging"}, "/", "", nil)
	if d, err := g.Decide(ctx, a); err != nil || d.Outcome != govern.Deny {
		t.Errorf("rejected action: %+v, %v", d, err)
	}
	decided, err := ops.ListApprovals(ctx, warden.ApprovalQuery{State: "approved", Principal: requester.ID})
	if err != nil || len(decided) != 1 || decided[0].ID != first {
		t.Errorf("approved list: %+v, %v", decided, err)
	}
	_, err = ops.ListApprovals(ctx, warden.ApprovalQuery{State: "bogus"})
	apiErr(t, err, http.StatusBadRequest, "bad_request")
}

func TestGovernUnavailable(t *testing.T) {
	// The shared server has no engine: the routes answer 503, not 500.
	_, err := env.admin.ListPolicies(ctxT(t, 10*time.Second))
	apiErr(t, err, http.StatusServiceUnavailable, "unavailable")
}
