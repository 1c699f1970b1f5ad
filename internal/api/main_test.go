package api

// These tests build the real stack: a sqlite store, the authenticator, the
// audit log, the native backend running warden-agent (built here), the
// template registry, the sandbox manager and the Server on an httptest
// server, driven by the Go SDK and by plain net/http. As root (CI) they run
// real native sandboxes; otherwise, or with WARDEN_TEST_BACKEND=fake, the
// fake backend, and tests that need a real sandbox skip (fakebackend_test.go).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
	"github.com/warden-sandbox/warden/internal/template"
	warden "github.com/warden-sandbox/warden/sdk/go"
)

// env is the stack every test shares.
var env struct {
	srv   *Server
	hs    *httptest.Server
	st    store.Store
	auth  *auth.Authenticator
	alog  *audit.Logger    // closed at teardown
	audit *govern.AuditLog // what the server writes and reads through
	mgr   *sandbox.Manager

	adminKey string
	admin    *warden.Client

	// Agents A and B have every sandbox and file scope but sandboxes:all.
	aID, bID   string
	aKey, bKey string
	a, b       *warden.Client

	// sbA belongs to agent A and runs for the whole package; tests that do
	// not kill it share it.
	sbA string
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "warden-api-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	if err := setup(dir); err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
		return 1
	}
	code := m.Run()
	teardown()
	return code
}

func setup(dir string) error {
	ctx := context.Background()
	var logw io.Writer = io.Discard
	if os.Getenv("WARDEN_TEST_LOG") != "" {
		logw = os.Stderr
	}
	log := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelDebug}))

	st, err := sqlite.Open(ctx, filepath.Join(dir, "warden.db"))
	if err != nil {
		return err
	}
	env.st = st
	env.auth = auth.New(st)
	key, err := audit.LoadOrCreateKey(filepath.Join(dir, "audit.key"))
	if err != nil {
		return err
	}
	env.alog, err = audit.New(ctx, audit.Config{Store: st, Key: key, CheckpointPath: filepath.Join(dir, "audit.checkpoint")})
	if err != nil {
		return err
	}
	if env.audit, err = govern.NewAuditLog(env.alog, st, log); err != nil {
		return err
	}
	b, err := testBackend(dir) // native as root, else the fake (fakebackend_test.go)
	if err != nil {
		return err
	}
	// OnEnd goes to the API server, built after the manager it serves.
	env.mgr = sandbox.New(sandbox.Config{OnEnd: func(sb store.Sandbox) { env.srv.SandboxEnded(sb) }},
		st, b, mustStore(filepath.Join(dir, "templates")), log)
	env.srv, err = New(Config{
		Manager: env.mgr, Store: st, Auth: env.auth, Audit: env.audit, Logger: log,
		PresignKey: []byte("test presign key"), Version: "test",
		PreviewDomain: testPreviewDomain,
	})
	if err != nil {
		return err
	}
	env.hs = httptest.NewServer(env.srv.Handler())

	admin, err := env.auth.CreatePrincipal(ctx, store.PrincipalUser, "admin", "")
	if err != nil {
		return err
	}
	env.adminKey, _, err = env.auth.IssueKey(ctx, admin.ID, "admin", []auth.Scope{auth.ScopeAdmin})
	if err != nil {
		return err
	}
	env.admin = client(env.adminKey)

	agentScopes := []string{"sandboxes:create", "sandboxes:read", "sandboxes:exec", "sandboxes:delete", "files:read", "files:write"}
	env.aID, env.aKey, err = newAgent(ctx, "agent-a", agentScopes)
	if err != nil {
		return err
	}
	env.bID, env.bKey, err = newAgent(ctx, "agent-b", agentScopes)
	if err != nil {
		return err
	}
	env.a, env.b = client(env.aKey), client(env.bKey)

	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	sb, err := env.a.CreateSandbox(cctx, warden.CreateSandboxRequest{Metadata: map[string]string{"role": "shared"}, TimeoutSeconds: 600})
	if err != nil {
		return fmt.Errorf("create shared sandbox: %w", err)
	}
	env.sbA = sb.ID
	return nil
}

// newAgent creates an agent principal through the API (as the admin) and a
// key for it with the given scopes.
func newAgent(ctx context.Context, name string, scopes []string) (id, key string, err error) {
	p, err := env.admin.CreatePrincipal(ctx, warden.CreatePrincipalRequest{Kind: warden.KindAgent, Name: name})
	if err != nil {
		return "", "", err
	}
	k, err := env.admin.CreateKey(ctx, warden.CreateKeyRequest{PrincipalID: p.ID, Name: name, Scopes: scopes})
	if err != nil {
		return "", "", err
	}
	return p.ID, k.Key, nil
}

func teardown() {
	ctx := context.Background()
	for {
		sbs, _, err := env.mgr.List(ctx, store.SandboxFilter{States: []string{"running", "starting", "paused"}, Limit: 1000})
		if err != nil || len(sbs) == 0 {
			break
		}
		for _, sb := range sbs {
			env.mgr.Kill(ctx, sb.ID, "test teardown")
		}
	}
	env.hs.Close()
	env.alog.Close()
	env.st.Close()
}

// client returns an SDK client for the test server with the given key and
// no retries.
func client(key string) *warden.Client {
	c, err := warden.New(warden.WithBaseURL(env.hs.URL), warden.WithAPIKey(key), warden.WithRetry(warden.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		panic(err)
	}
	return c
}

// uniq returns a fresh suffix for names, so that tests can run again
// (-count) against the same daemon.
func uniq() string { return strings.TrimPrefix(sandbox.NewID(), "sb-")[:8] }

// ctxT returns a context that ends with the test or after d.
func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// apiErr asserts that err is a Warden API error with the given status and
// code.
func apiErr(t *testing.T, err error, status int, code string) {
	t.Helper()
	var e *warden.Error
	if err == nil {
		t.Fatalf("got no error, want %d %s", status, code)
	}
	if !errors.As(err, &e) || e.Status != status || e.Code != code {
		t.Fatalf("got error %v, want %d %s", err, status, code)
	}
	if e.RequestID == "" {
		t.Errorf("error %v carries no request ID", err)
	}
}

func mustStore(root string) *template.Store {
	s, err := template.OpenStore(root)
	if err != nil {
		panic(err)
	}
	return s
}
