package e2b

// These tests build the real stack, like internal/api's: a sqlite store,
// the authenticator, the audit log, the native backend running
// warden-agent (built here), the template registry, the sandbox manager and
// the E2B handler on an httptest server (HTTP/1.1, as Node's undici speaks
// over plain http). They need root; CI runs as root.

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/warden-sandbox/warden/internal/audit"
	"github.com/warden-sandbox/warden/internal/auth"
	"github.com/warden-sandbox/warden/internal/govern"
	"github.com/warden-sandbox/warden/internal/sandbox"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
	"github.com/warden-sandbox/warden/internal/template"
)

var env struct {
	srv   *Server
	hs    *httptest.Server
	st    store.Store
	alog  *audit.Logger    // closed at teardown
	audit *govern.AuditLog // what the server writes and reads through
	mgr   *sandbox.Manager

	aID, bID   string
	aKey, bKey string
	readOnly   string // a key of A with sandboxes:read only
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		return m.Run() // fuzz targets need no sandboxes
	}
	dir, err := os.MkdirTemp("", "warden-e2b-test-")
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
	authn := auth.New(st)
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
	// Real sandbox networking, as wardend has it (E2B's create sends
	// allow_internet_access), on the native backend.
	nm, err := testNetwork()
	if err != nil {
		return fmt.Errorf("network: %w", err)
	}
	env.mgr = sandbox.New(sandbox.Config{Net: nm}, st, b, mustStore(filepath.Join(dir, "templates")), log)
	env.srv, err = New(Config{Manager: env.mgr, Auth: authn, Audit: env.audit, Logger: log,
		TokenKey: []byte("test e2b token key, 32 bytes...")})
	if err != nil {
		return err
	}
	env.hs = httptest.NewServer(env.srv.Handler())

	scopes := []auth.Scope{auth.ScopeSandboxesCreate, auth.ScopeSandboxesRead, auth.ScopeSandboxesExec,
		auth.ScopeSandboxesDelete, auth.ScopeFilesRead, auth.ScopeFilesWrite}
	for _, p := range []struct {
		name    string
		id, key *string
	}{{"agent-a", &env.aID, &env.aKey}, {"agent-b", &env.bID, &env.bKey}} {
		pr, err := authn.CreatePrincipal(ctx, store.PrincipalAgent, p.name, "")
		if err != nil {
			return err
		}
		*p.id = pr.ID
		if *p.key, _, err = authn.IssueKey(ctx, pr.ID, p.name, scopes); err != nil {
			return err
		}
	}
	env.readOnly, _, err = authn.IssueKey(ctx, env.aID, "ro", []auth.Scope{auth.ScopeSandboxesRead})
	return err
}

func teardown() {
	ctx := context.Background()
	sbs, _, _ := env.mgr.List(ctx, store.SandboxFilter{States: []string{"running", "starting", "paused"}, Limit: 1000})
	for _, sb := range sbs {
		env.mgr.Kill(ctx, sb.ID, "test teardown")
	}
	env.hs.Close()
	env.alog.Close()
	env.st.Close()
}

// do sends a request to the E2B handler and returns status, headers and body.
func do(t *testing.T, method, path string, hdr map[string]string, body io.Reader) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, env.hs.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, b
}

// api calls the control plane with key and a JSON body (nil for none).
func api(t *testing.T, key, method, path string, in any) (int, http.Header, []byte) {
	t.Helper()
	var body io.Reader
	hdr := map[string]string{"X-API-Key": key}
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
		hdr["Content-Type"] = "application/json"
	}
	return do(t, method, path, hdr, body)
}

func decodeJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

// wantError asserts E2B's error body {"code": status, "message": ...}.
func wantError(t *testing.T, status int, gotStatus int, b []byte) {
	t.Helper()
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if gotStatus != status {
		t.Fatalf("status %d, want %d (body %s)", gotStatus, status, b)
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Code != status || e.Message == "" {
		t.Fatalf("error body %s: want {\"code\":%d,\"message\":...}", b, status)
	}
}

type created struct {
	SandboxID          string  `json:"sandboxID"`
	TemplateID         string  `json:"templateID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
}

// create makes a sandbox for key through POST /v2/sandboxes.
func create(t *testing.T, key string, body map[string]any) created {
	t.Helper()
	if body == nil {
		body = map[string]any{"templateID": "base"}
	}
	st, _, b := api(t, key, "POST", "/v2/sandboxes", body)
	if st != http.StatusCreated {
		t.Fatalf("create: %d %s", st, b)
	}
	var c created
	decodeJSON(t, b, &c)
	t.Cleanup(func() { env.mgr.Kill(context.Background(), c.SandboxID, "test cleanup") })
	return c
}

// auditActions returns the actions audited for target.
func auditActions(t *testing.T, target string) []store.AuditEvent {
	t.Helper()
	evs, err := env.st.ListAudit(context.Background(), store.AuditFilter{Target: target, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func mustStore(root string) *template.Store {
	s, err := template.OpenStore(root)
	if err != nil {
		panic(err)
	}
	return s
}
