package agents

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
)

func TestSpecSecretsShape(t *testing.T) {
	// The older form (bare names) still parses, is not granted and
	// marshals back as it was: stored versions keep working.
	old, err := ParseSpec([]byte(`{"name":"a","command":["x"],"secrets":["GITHUB_TOKEN"]}`))
	if err != nil || len(old.Secrets) != 1 || !old.Secrets[0].Legacy() || len(granted(old.Secrets)) != 0 {
		t.Fatalf("legacy spec = %+v, %v", old.Secrets, err)
	}
	if b, _ := json.Marshal(old.Secrets); string(b) != `["GITHUB_TOKEN"]` {
		t.Fatalf("legacy marshal = %s", b)
	}
	s, err := ParseSpec([]byte(`{"name":"a","command":["x"],"memory":{"team":"ops"},"policies":["p1"],
		"secrets":[{"secret":"github","hosts":["api.github.com"],"env_name":"GITHUB_TOKEN","header":"Authorization"}]}`))
	if err != nil || len(granted(s.Secrets)) != 1 || s.Secrets[0].EnvName != "GITHUB_TOKEN" || s.team() != "ops" {
		t.Fatalf("spec = %+v, %v", s, err)
	}
	for name, js := range map[string]string{
		"no hosts":       `[{"secret":"g","env_name":"G"}]`,
		"no secret":      `[{"hosts":["a.example.com"]}]`,
		"bad host":       `[{"secret":"g","hosts":["http://a.example.com/"]}]`,
		"bad env":        `[{"secret":"g","hosts":["a.example.com"],"env_name":"1X"}]`,
		"warden env":     `[{"secret":"g","hosts":["a.example.com"],"env_name":"WARDEN_API_KEY"}]`,
		"env twice":      `[{"secret":"g","hosts":["a.example.com"],"env_name":"G"},{"secret":"h","hosts":["b.example.com"],"env_name":"G"}]`,
		"bad header":     `[{"secret":"g","hosts":["a.example.com"],"header":"Host"}]`,
		"unknown field":  `[{"secret":"g","hosts":["a.example.com"],"value":"x"}]`,
		"bad team":       `[], "memory": {"team": "Ops Team"}`,
		"policy twice":   `[], "policies": ["p","p"]`,
		"empty policy":   `[], "policies": [""]`,
		"format unknown": `[{"secret":"g","hosts":["a.example.com"],"format":"basic"}]`,
	} {
		if _, err := ParseSpec([]byte(`{"name":"a","command":["x"],"secrets":` + js + `}`)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

type fakeKeys struct {
	nilKeys
	mu    sync.Mutex
	n     int
	issue chan struct{} // closed: IssueKey answers; else it waits for ctx
	st    *sqlite.Store
}

func (k *fakeKeys) CreatePrincipal(ctx context.Context, kind, name, createdBy string) (store.Principal, error) {
	p := store.Principal{ID: "pr-" + name, Kind: kind, Name: name, CreatedBy: createdBy, CreatedAt: time.Now()}
	return p, k.st.CreatePrincipal(ctx, p)
}

func (k *fakeKeys) IssueKey(ctx context.Context, principalID, name string, scopes []auth.Scope) (string, store.APIKey, error) {
	k.mu.Lock()
	k.n++
	k.mu.Unlock()
	select {
	case <-k.issue:
	case <-ctx.Done():
	}
	return "", store.APIKey{}, errors.New("no keys here")
}

type fakeGrants struct {
	mu      sync.Mutex
	checked []string
}

func (g *fakeGrants) CheckSecrets(ctx context.Context, by auth.Identity, owner string, gs []SecretGrant) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, x := range gs {
		g.checked = append(g.checked, x.Secret)
		if x.Secret == "theirs" && !by.Has(auth.ScopeAdmin) {
			return &ForbiddenError{Msg: "secret theirs is not yours"}
		}
	}
	return nil
}

func (g *fakeGrants) SyncSandbox(context.Context, string, string, string, string, []SecretGrant, bool) (map[string]string, error) {
	return nil, nil
}

type fakePolicies struct {
	mu       sync.Mutex
	attached map[string][]string
}

func (p *fakePolicies) HasPolicy(id string) bool { return id != "missing" }
func (p *fakePolicies) Attach(principal string, ids []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(ids) == 0 {
		delete(p.attached, principal)
		return
	}
	p.attached[principal] = slices.Clone(ids)
}
func (p *fakePolicies) get(principal string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.attached[principal]
}

func enforceService(t *testing.T, maxRuns int) (*Service, *sqlite.Store, *fakeKeys, *fakeGrants, *fakePolicies) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "w.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	keys := &fakeKeys{issue: make(chan struct{}), st: st}
	g, p := &fakeGrants{}, &fakePolicies{attached: map[string][]string{}}
	s, err := New(Config{Store: st, Sandboxes: nilSandboxes{}, Keys: keys, LogDir: t.TempDir(), MaxRuns: maxRuns,
		Grants: g, Policies: p, Teams: st})
	if err != nil {
		t.Fatal(err)
	}
	return s, st, keys, g, p
}

func human(id string, scopes ...auth.Scope) auth.Identity {
	return auth.Identity{Principal: store.Principal{ID: id, Kind: store.PrincipalUser, Name: id}, Scopes: scopes}
}

func specOf(t *testing.T, js string) Spec {
	t.Helper()
	var s Spec
	if err := json.Unmarshal([]byte(js), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestEnforcedDefinitions: creating and updating agents checks their
// secrets (the creator's to grant), policies (policies:write to attach;
// attached to the principal, detached on delete) and team memory (its
// owner's agents, or an admin's, may join).
func TestEnforcedDefinitions(t *testing.T) {
	s, st, _, g, pol := enforceService(t, 0)
	ctx := t.Context()
	alice, bob, root := human("alice"), human("bob"), human("root", auth.ScopeAdmin)
	for _, id := range []string{"alice", "bob", "root"} {
		if err := st.CreatePrincipal(ctx, store.Principal{ID: id, Kind: store.PrincipalUser, Name: id, CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}

	// Secrets: a secret the creator may not use is refused (403), one it
	// may is checked and recorded; a bare name is refused for new versions.
	var forb *ForbiddenError
	var inv *InvalidError
	_, err := s.Create(ctx, alice, specOf(t, `{"name":"a1","command":["x"],"secrets":[{"secret":"theirs","hosts":["api.example.com"]}]}`))
	if !errors.As(err, &forb) {
		t.Fatalf("someone else's secret: %v", err)
	}
	if _, err := st.GetAgentByName(ctx, "a1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused agent was stored: %v", err)
	}
	_, err = s.Create(ctx, alice, specOf(t, `{"name":"a1","command":["x"],"secrets":["GITHUB_TOKEN"]}`))
	if !errors.As(err, &inv) || !strings.Contains(inv.Msg, "grants nothing") {
		t.Fatalf("bare secret name: %v", err)
	}
	a1, err := s.Create(ctx, alice, specOf(t, `{"name":"a1","command":["x"],"secrets":[{"secret":"mine","hosts":["api.example.com"],"env_name":"TOKEN"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	// An admin adds a secret of another owner; alice may still edit the
	// rest of the definition (unchanged entries are not checked again).
	js := `{"name":"a1","command":["y"],"secrets":[{"secret":"mine","hosts":["api.example.com"],"env_name":"TOKEN"},{"secret":"theirs","hosts":["b.example.com"]}]}`
	if a1, err = s.Update(ctx, root, a1, specOf(t, js)); err != nil {
		t.Fatal(err)
	}
	g.checked = nil
	if a1, err = s.Update(ctx, alice, a1, specOf(t, strings.Replace(js, `["y"]`, `["z"]`, 1))); err != nil || len(g.checked) != 0 {
		t.Fatalf("owner's edit of an admin-extended agent: %v (checked %v)", err, g.checked)
	}

	// Policies: attaching needs policies:write; a missing policy is a 400;
	// the attachment follows the versions and ends with the agent.
	withPol := `{"name":"a2","command":["x"],"policies":["no-curl"]}`
	if _, err := s.Create(ctx, alice, specOf(t, withPol)); !errors.As(err, &forb) {
		t.Fatalf("policies without policies:write: %v", err)
	}
	if _, err := s.Create(ctx, root, specOf(t, `{"name":"a2","command":["x"],"policies":["missing"]}`)); !errors.As(err, &inv) {
		t.Fatalf("a missing policy: %v", err)
	}
	editor := human("alice", auth.ScopePoliciesWrite)
	a2, err := s.Create(ctx, editor, specOf(t, withPol))
	if err != nil {
		t.Fatal(err)
	}
	if got := pol.get(a2.PrincipalID); !slices.Equal(got, []string{"no-curl"}) {
		t.Fatalf("attached = %v", got)
	}
	// The owner without policies:write may change the rest, not the policies.
	if _, err := s.Update(ctx, alice, a2, specOf(t, `{"name":"a2","command":["x"],"policies":["no-curl","other"]}`)); !errors.As(err, &forb) {
		t.Fatalf("changing policies without policies:write: %v", err)
	}
	if a2, err = s.Update(ctx, alice, a2, specOf(t, `{"name":"a2","command":["y"],"policies":["no-curl"]}`)); err != nil {
		t.Fatal(err)
	}
	if a2, err = s.Update(ctx, editor, a2, specOf(t, `{"name":"a2","command":["y"],"policies":["other"]}`)); err != nil {
		t.Fatal(err)
	}
	if got := pol.get(a2.PrincipalID); !slices.Equal(got, []string{"other"}) {
		t.Fatalf("attached after update = %v", got)
	}
	// A restart attaches every agent's current policies again.
	pol.attached = map[string][]string{}
	if err := s.attachAll(ctx); err != nil || !slices.Equal(pol.get(a2.PrincipalID), []string{"other"}) {
		t.Fatalf("attachAll: %v, %v", err, pol.attached)
	}
	if err := s.Delete(ctx, editor, a2); err != nil {
		t.Fatal(err)
	}
	if got := pol.get(a2.PrincipalID); got != nil {
		t.Fatalf("attached after delete = %v", got)
	}

	// Team memory: the first agent's owner owns the team; another owner's
	// agent may not join it, an admin's may; TeamOf names it.
	if _, err := s.Create(ctx, alice, specOf(t, `{"name":"t1","command":["x"],"memory":{"team":"ops"}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, alice, specOf(t, `{"name":"t2","command":["x"],"memory":{"team":"ops"}}`)); err != nil {
		t.Fatalf("the owner's second agent: %v", err)
	}
	if _, err := s.Create(ctx, bob, specOf(t, `{"name":"t3","command":["x"],"memory":{"team":"ops"}}`)); !errors.As(err, &forb) {
		t.Fatalf("another owner's agent joined: %v", err)
	}
	if _, err := s.Create(ctx, root, specOf(t, `{"name":"t4","command":["x"],"memory":{"team":"ops"}}`)); err != nil {
		t.Fatalf("an admin's agent: %v", err)
	}
	if owner, err := st.GetMemoryTeam(ctx, "ops"); err != nil || owner != "alice" {
		t.Fatalf("team owner = %q, %v", owner, err)
	}
	if team, ok := s.TeamOf(ctx, "t2"); !ok || team != "ops" {
		t.Fatalf("TeamOf(t2) = %q, %v", team, ok)
	}
	if _, ok := s.TeamOf(ctx, "a1"); ok {
		t.Fatal("TeamOf an agent without a team")
	}
}

// TestMaxConcurrentRuns: the global limit holds runs queued beyond it,
// whatever the agents' own concurrency.
func TestMaxConcurrentRuns(t *testing.T) {
	s, st, keys, _, _ := enforceService(t, 2)
	t.Cleanup(s.Close)
	ctx := t.Context()
	for _, name := range []string{"r1", "r2", "r3"} {
		a := addAgent(t, st, name, Spec{Name: name, Command: []string{"x"}, Concurrency: 4})
		for range 2 {
			if _, err := s.Trigger(ctx, a, TriggerManual, "alice", nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.dispatch()
	running, err := st.ListAgentRuns(ctx, store.AgentRunFilter{States: []string{store.RunRunning}})
	if err != nil {
		t.Fatal(err)
	}
	queued, _ := st.ListAgentRuns(ctx, store.AgentRunFilter{States: []string{store.RunQueued}})
	if len(running) != 2 || len(queued) != 4 {
		t.Fatalf("running %d, queued %d; want 2 and 4 with max_concurrent_runs 2", len(running), len(queued))
	}
	s.dispatch() // nothing ended: still 2
	if running, _ = st.ListAgentRuns(ctx, store.AgentRunFilter{States: []string{store.RunRunning}}); len(running) != 2 {
		t.Fatalf("running %d after a second dispatch", len(running))
	}
	keys.mu.Lock()
	issued := keys.n
	keys.mu.Unlock()
	if issued > 2 {
		t.Fatalf("%d runs started executing", issued)
	}
}
