package api

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/govern"
	warden "github.com/warden-sandbox/warden/sdk/go"
)

func TestAnonAuditAllow(t *testing.T) {
	var l anonAudit
	t0 := time.Unix(1000, 0)
	if n, ok := l.allow("k", t0); !ok || n != 0 {
		t.Fatalf("first event: %d %v", n, ok)
	}
	for i := range 5 {
		if _, ok := l.allow("k", t0.Add(time.Duration(i)*100*time.Millisecond)); ok {
			t.Fatalf("event %d within the second was allowed", i)
		}
	}
	if _, ok := l.allow("other", t0); !ok {
		t.Fatal("another key shares the first key's bound")
	}
	if n, ok := l.allow("k", t0.Add(time.Second)); !ok || n != 5 {
		t.Fatalf("after a second: %d %v, want 5 suppressed", n, ok)
	}
	// A clock that steps back does not silence a key.
	if _, ok := l.allow("k", t0); !ok {
		t.Fatal("a clock that went back silenced the key")
	}
	// The keys remembered are bounded.
	for i := range 3 * anonAuditKeys {
		l.allow(strconv.Itoa(i), t0)
	}
	if len(l.keys) > anonAuditKeys {
		t.Fatalf("%d keys remembered, bound %d", len(l.keys), anonAuditKeys)
	}
}

// TestAnonPreviewRefusalsBounded: anonymous requests to a public port that
// a rule refuses are each refused, but audited once a second, and the next
// audited one counts those left out.
func TestAnonPreviewRefusalsBounded(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	g := govern.New(govern.Config{})
	defer g.Close()
	if _, err := g.CreatePolicy(ctx, govern.Policy{ID: "no-secret", Scope: govern.Scope{Kind: govern.ScopeInstallation},
		Rules: []govern.Rule{{ID: "secret", Kinds: []govern.Kind{govern.KindPortPreview}, Outcome: govern.Deny,
			When: `port.path.startsWith("/secret")`, Message: "no secrets"}}}, "t"); err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Manager: env.mgr, Store: env.st, Auth: env.auth, Audit: env.audit,
		Logger: slog.New(slog.DiscardHandler), PresignKey: []byte("test presign key"), Version: "test", Govern: g})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := time.Now()
	srv.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	a, err := warden.New(warden.WithBaseURL(hs.URL), warden.WithAPIKey(env.aKey))
	if err != nil {
		t.Fatal(err)
	}
	sb, err := a.CreateSandbox(ctx, warden.CreateSandboxRequest{TimeoutSeconds: 120})
	if err != nil {
		t.Fatal(err)
	}
	defer a.KillSandbox(context.Background(), sb.ID)
	const port = 8123
	if _, err := a.PublishPort(ctx, sb.ID, port, true); err != nil {
		t.Fatal(err)
	}
	get := func() {
		t.Helper()
		resp, err := http.Get(hs.URL + "/v1/sandboxes/" + sb.ID + "/ports/" + strconv.Itoa(port) + "/proxy/secret/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("anonymous request refused by a rule: status %d, want 403", resp.StatusCode)
		}
	}
	refusals := func() (evs []warden.AuditEvent) {
		t.Helper()
		for ev, err := range env.admin.AllAuditEvents(ctx, warden.AuditQuery{Target: sb.ID, Limit: 1000}) {
			if err != nil {
				t.Fatal(err)
			}
			if ev.Outcome == "denied" && ev.PrincipalID == "" {
				evs = append(evs, ev)
			}
		}
		return evs
	}
	for range 20 {
		get()
	}
	if evs := refusals(); len(evs) != 1 {
		t.Fatalf("20 refusals in one second: %d audit events, want 1", len(evs))
	}
	mu.Lock()
	now = now.Add(1100 * time.Millisecond)
	mu.Unlock()
	get()
	evs := refusals()
	if len(evs) != 2 {
		t.Fatalf("after a second: %d audit events, want 2", len(evs))
	}
	var suppressed any
	for _, ev := range evs {
		if v, ok := ev.Detail["suppressed"]; ok {
			suppressed = v
		}
	}
	if suppressed != float64(19) {
		t.Fatalf("the second event's suppressed count: %v, want 19", suppressed)
	}
}
