package auth_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
)

func openStore(t testing.TB) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "warden.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// clock is a settable time source.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func setup(t *testing.T) (*sqlite.Store, *auth.Authenticator, *clock, store.Principal) {
	t.Helper()
	st := openStore(t)
	c := newClock()
	a := auth.New(st, auth.WithClock(c.now))
	p, err := a.CreatePrincipal(t.Context(), store.PrincipalAgent, "ci-bot", "")
	if err != nil {
		t.Fatal(err)
	}
	return st, a, c, p
}

func TestKeyRoundTrip(t *testing.T) {
	st, a, _, p := setup(t)
	ctx := t.Context()
	token, rec, err := a.IssueKey(ctx, p.ID, "ci", []auth.Scope{auth.ScopeSandboxesCreate, auth.ScopeSandboxesRead})
	if err != nil {
		t.Fatal(err)
	}
	if len(token) != auth.KeyLen || !strings.HasPrefix(token, "wdn_"+rec.ID+"_") {
		t.Fatalf("token %q does not have the wdn_<id>_<secret> form", token)
	}
	if rec.Prefix != "wdn_"+rec.ID || strings.Contains(rec.Hash, token[len(token)-32:]) {
		t.Errorf("record %+v", rec)
	}
	stored, err := st.GetKeyByID(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	secret := token[len(token)-auth.KeySecretLen:]
	if stored.Hash != auth.HashSecret(secret) || stored.Hash == secret {
		t.Errorf("stored hash %q is not SHA-256 of the secret", stored.Hash)
	}

	id, err := a.Authenticate(ctx, "Bearer "+token)
	if err != nil {
		t.Fatalf("Authenticate: %v", err)
	}
	if id.Principal.ID != p.ID || id.Principal.Name != "ci-bot" || id.Key.ID != rec.ID {
		t.Errorf("identity %+v", id)
	}
	if !id.Has(auth.ScopeSandboxesCreate) || id.Has(auth.ScopeSandboxesExec) || id.Has(auth.ScopeAdmin) {
		t.Errorf("scopes %v", id.Scopes)
	}
	// Scheme is case-insensitive; surrounding space is tolerated.
	if _, err := a.Authenticate(ctx, "  bearer "+token+" "); err != nil {
		t.Errorf("lowercase scheme: %v", err)
	}
}

func TestAuthenticateFailures(t *testing.T) {
	_, a, _, p := setup(t)
	ctx := t.Context()
	token, _, err := a.IssueKey(ctx, p.ID, "ci", []auth.Scope{auth.ScopeSandboxesRead})
	if err != nil {
		t.Fatal(err)
	}
	other, err := auth.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	wrongSecret := token[:len(token)-auth.KeySecretLen] + other.Secret
	unknownID := auth.Key{ID: other.ID, Secret: token[len(token)-auth.KeySecretLen:]}.String()
	cases := []struct {
		name, header string
		want         error
	}{
		{"empty", "", auth.ErrNoCredentials},
		{"blank", "   ", auth.ErrNoCredentials},
		{"no scheme", token, auth.ErrMalformed},
		{"basic", "Basic " + token, auth.ErrMalformed},
		{"bearer only", "Bearer", auth.ErrMalformed},
		{"bearer empty", "Bearer ", auth.ErrMalformed},
		{"truncated", "Bearer " + token[:len(token)-1], auth.ErrMalformed},
		{"extra", "Bearer " + token + "x", auth.ErrMalformed},
		{"two tokens", "Bearer " + token + " " + token, auth.ErrMalformed},
		{"wrong prefix", "Bearer wdx_" + token[4:], auth.ErrMalformed},
		{"uppercase id", "Bearer " + strings.ToUpper(token[:12]) + token[12:], auth.ErrMalformed},
		{"bad secret char", "Bearer " + token[:len(token)-1] + "-", auth.ErrMalformed},
		{"wrong secret", "Bearer " + wrongSecret, auth.ErrInvalidKey},
		{"unknown id", "Bearer " + unknownID, auth.ErrInvalidKey},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := a.Authenticate(ctx, c.header)
			if !errors.Is(err, c.want) || !errors.Is(err, auth.ErrUnauthenticated) {
				t.Errorf("got %v, want %v (and ErrUnauthenticated)", err, c.want)
			}
		})
	}
}

func TestRevokedKeyRefusedImmediately(t *testing.T) {
	st, a, _, p := setup(t)
	ctx := t.Context()
	token, rec, err := a.IssueKey(ctx, p.ID, "ci", []auth.Scope{auth.ScopeAdmin})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // warm anything that could cache
		if _, err := a.Authenticate(ctx, "Bearer "+token); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.RevokeKey(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, "Bearer "+token); !errors.Is(err, auth.ErrRevoked) {
		t.Errorf("after revoke: got %v, want ErrRevoked", err)
	}
	// Revocation by another process writing the store directly also
	// takes effect at once.
	token2, rec2, err := a.IssueKey(ctx, p.ID, "ci2", []auth.Scope{auth.ScopeAdmin})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, "Bearer "+token2); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RevokeKey(ctx, rec2.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, "Bearer "+token2); !errors.Is(err, auth.ErrRevoked) {
		t.Errorf("after store revoke: got %v, want ErrRevoked", err)
	}
	if _, err := a.RevokeKey(ctx, "zzzzzzzz"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("revoke unknown: got %v, want ErrNotFound", err)
	}
}

func TestLastUsedThrottled(t *testing.T) {
	st, a, c, p := setup(t)
	ctx := t.Context()
	token, rec, err := a.IssueKey(ctx, p.ID, "ci", nil)
	if err != nil {
		t.Fatal(err)
	}
	lastUsed := func() time.Time {
		t.Helper()
		k, err := st.GetKeyByID(ctx, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		return k.LastUsedAt
	}
	first := c.now()
	if _, err := a.Authenticate(ctx, "Bearer "+token); err != nil {
		t.Fatal(err)
	}
	if got := lastUsed(); !got.Equal(first) {
		t.Fatalf("first use: LastUsedAt %v, want %v", got, first)
	}
	c.advance(30 * time.Second)
	if _, err := a.Authenticate(ctx, "Bearer "+token); err != nil {
		t.Fatal(err)
	}
	if got := lastUsed(); !got.Equal(first) {
		t.Errorf("use within a minute wrote LastUsedAt %v", got)
	}
	c.advance(31 * time.Second)
	if _, err := a.Authenticate(ctx, "Bearer "+token); err != nil {
		t.Fatal(err)
	}
	if got := lastUsed(); !got.Equal(c.now()) {
		t.Errorf("use after a minute: LastUsedAt %v, want %v", got, c.now())
	}
	// A second Authenticator (daemon restart) goes by the stored value.
	a2 := auth.New(st, auth.WithClock(c.now))
	before := lastUsed()
	c.advance(10 * time.Second)
	if _, err := a2.Authenticate(ctx, "Bearer "+token); err != nil {
		t.Fatal(err)
	}
	if got := lastUsed(); !got.Equal(before) {
		t.Errorf("fresh authenticator rewrote LastUsedAt within the interval")
	}
}

func TestScopes(t *testing.T) {
	agent := auth.Identity{
		Principal: store.Principal{ID: "pr-agent", Kind: store.PrincipalAgent},
		Scopes:    []auth.Scope{auth.ScopeSandboxesCreate, auth.ScopeSandboxesExec},
	}
	if !agent.Has(auth.ScopeSandboxesExec) || agent.Has(auth.ScopeFilesRead) || agent.Has(auth.ScopeAdmin) {
		t.Error("agent Has")
	}
	if !agent.CanAccessSandbox("pr-agent") || agent.CanAccessSandbox("pr-other") || agent.CanAccessSandbox("") {
		t.Error("agent CanAccessSandbox")
	}
	all := agent
	all.Scopes = []auth.Scope{auth.ScopeSandboxesAll}
	if !all.CanAccessSandbox("pr-other") || all.Has(auth.ScopeSandboxesExec) {
		t.Error("sandboxes:all")
	}
	admin := auth.Identity{Principal: store.Principal{ID: "pr-admin"}, Scopes: []auth.Scope{auth.ScopeAdmin}}
	for _, s := range auth.AllScopes() {
		if !admin.Has(s) {
			t.Errorf("admin lacks %s", s)
		}
	}
	if !admin.CanAccessSandbox("pr-other") {
		t.Error("admin cannot access others' sandboxes")
	}
	none := auth.Identity{Principal: store.Principal{ID: "pr-x"}}
	if none.Has(auth.ScopeSandboxesRead) {
		t.Error("no scopes but Has")
	}

	if len(auth.AllScopes()) != 29 || !auth.ScopeWebhooksAdmin.HumanOnly() || !auth.ScopeAgentsRun.Valid() || auth.ScopeAgentsRun.HumanOnly() || !auth.ScopeAgentsWrite.HumanOnly() || !auth.ScopeTemplatesRead.Valid() || !auth.ScopeSecretsWrite.Valid() || !auth.ScopeMetricsRead.Valid() ||
		!auth.ScopePoliciesWrite.Valid() || !auth.ScopeApprovalsDecide.Valid() || !auth.ScopeMCPAdmin.Valid() || !auth.ScopeMCPUse.Valid() {
		t.Errorf("AllScopes has %d scopes (%v), want 29 with the templates, secrets, metrics, governance, mcp, llm, agents, monitor, memory and webhooks scopes", len(auth.AllScopes()), auth.AllScopes())
	}
	got, err := auth.ParseScopes([]string{"files:read", "admin", "files:read"})
	if err != nil || len(got) != 2 || got[0] != auth.ScopeFilesRead || got[1] != auth.ScopeAdmin {
		t.Errorf("ParseScopes = %v, %v", got, err)
	}
	if _, err := auth.ParseScopes([]string{"files:read", "root"}); err == nil {
		t.Error("ParseScopes accepted an unknown scope")
	}
	_, a, _, p := setup(t)
	if _, _, err := a.IssueKey(t.Context(), p.ID, "x", []auth.Scope{"nope"}); err == nil {
		t.Error("IssueKey accepted an unknown scope")
	}
	if _, _, err := a.IssueKey(t.Context(), "pr-ghost", "x", nil); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("IssueKey for unknown principal: %v", err)
	}
}

func TestCreatePrincipal(t *testing.T) {
	st, a, _, p := setup(t)
	q, err := a.CreatePrincipal(t.Context(), store.PrincipalUser, "alice", p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(q.ID, "pr-") || q.ID == p.ID || q.CreatedBy != p.ID {
		t.Errorf("principal %+v", q)
	}
	if got, err := st.GetPrincipal(t.Context(), q.ID); err != nil || got.Name != "alice" {
		t.Errorf("stored %+v, %v", got, err)
	}
	for _, c := range [][2]string{{"robot", "x"}, {store.PrincipalAgent, ""}} {
		if _, err := a.CreatePrincipal(t.Context(), c[0], c[1], ""); err == nil {
			t.Errorf("CreatePrincipal(%q, %q) succeeded", c[0], c[1])
		}
	}
}

func TestGenerateKey(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		k, err := auth.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		if seen[k.ID] || seen[k.Secret] {
			t.Fatalf("repeated key material %v", k)
		}
		seen[k.ID], seen[k.Secret] = true, true
		back, err := auth.ParseKey(k.String())
		if err != nil || back != k {
			t.Fatalf("ParseKey(%s) = %v, %v", k, back, err)
		}
	}
}

func TestBootstrap(t *testing.T) {
	st := openStore(t)
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "etc", "warden", "admin.key")
	got, err := auth.Bootstrap(ctx, st, path)
	if err != nil {
		t.Fatal(err)
	}
	if got != path {
		t.Errorf("Bootstrap returned %q, want %q", got, path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %o, want 600", fi.Mode().Perm())
	}
	di, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o700 {
		t.Errorf("key dir mode %o, want 700", di.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(b))
	id, err := auth.New(st).Authenticate(ctx, "Bearer "+token)
	if err != nil {
		t.Fatalf("bootstrap key does not authenticate: %v", err)
	}
	if id.Principal.Name != "admin" || id.Principal.Kind != store.PrincipalUser || id.Principal.CreatedBy != "" || !id.Has(auth.ScopeAdmin) {
		t.Errorf("bootstrap identity %+v", id)
	}

	// Later starts do nothing and leave the file alone.
	if err := os.Chmod(path, 0o400); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		got, err := auth.Bootstrap(ctx, st, path)
		if err != nil || got != "" {
			t.Errorf("second Bootstrap = %q, %v; want nothing done", got, err)
		}
	}
	if b2, _ := os.ReadFile(path); string(b2) != string(b) {
		t.Error("key file changed")
	}
	if n, _ := st.CountPrincipals(ctx); n != 1 {
		t.Errorf("%d principals after repeated bootstrap, want 1", n)
	}
}

func TestBootstrapNeverOverwrites(t *testing.T) {
	st := openStore(t)
	path := filepath.Join(t.TempDir(), "admin.key")
	if err := os.WriteFile(path, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Bootstrap(t.Context(), st, path); err == nil {
		t.Fatal("Bootstrap over an existing file succeeded")
	}
	if b, _ := os.ReadFile(path); string(b) != "precious\n" {
		t.Errorf("file overwritten: %q", b)
	}
	if n, _ := st.CountPrincipals(t.Context()); n != 0 {
		t.Errorf("principals created despite the failure: %d", n)
	}
}

func TestBootstrapStoreFailureRemovesFile(t *testing.T) {
	st := openStore(t)
	path := filepath.Join(t.TempDir(), "admin.key")
	// Make inserting principals fail inside SQLite itself.
	db, err := sql.Open("sqlite", st.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TRIGGER no_principals BEFORE INSERT ON principals BEGIN SELECT RAISE(ABORT, 'disk full'); END`); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.Bootstrap(t.Context(), st, path); err == nil {
		t.Fatal("Bootstrap succeeded although the store failed")
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("key file left behind: %v", err)
	}
	// Once the store works, Bootstrap succeeds.
	if _, err := db.Exec(`DROP TRIGGER no_principals`); err != nil {
		t.Fatal(err)
	}
	if got, err := auth.Bootstrap(t.Context(), st, path); err != nil || got != path {
		t.Errorf("Bootstrap after recovery = %q, %v", got, err)
	}
}

func BenchmarkAuthenticate(b *testing.B) {
	st := openStore(b)
	a := auth.New(st)
	ctx := context.Background()
	p, err := a.CreatePrincipal(ctx, store.PrincipalAgent, "bench", "")
	if err != nil {
		b.Fatal(err)
	}
	token, _, err := a.IssueKey(ctx, p.ID, "bench", []auth.Scope{auth.ScopeAdmin})
	if err != nil {
		b.Fatal(err)
	}
	header := "Bearer " + token
	for b.Loop() {
		if _, err := a.Authenticate(ctx, header); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCheckKey: CheckKey follows the key's state with no cache: valid,
// then revoked the moment it is; unknown and empty IDs are invalid.
func TestCheckKey(t *testing.T) {
	_, a, _, p := setup(t)
	ctx := t.Context()
	_, rec, err := a.IssueKey(ctx, p.ID, "e2b", []auth.Scope{auth.ScopeSandboxesExec})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.CheckKey(ctx, rec.ID); err != nil {
		t.Fatalf("valid key: %v", err)
	}
	if _, err := a.RevokeKey(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	if err := a.CheckKey(ctx, rec.ID); !errors.Is(err, auth.ErrRevoked) {
		t.Errorf("revoked key: got %v, want ErrRevoked", err)
	}
	for _, id := range []string{"", "zzzzzzzz"} {
		if err := a.CheckKey(ctx, id); !errors.Is(err, auth.ErrInvalidKey) {
			t.Errorf("key %q: got %v, want ErrInvalidKey", id, err)
		}
	}
}
