package cli

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestClientDefaults checks where the daemon's address and the API key come from:
// flags, then the environment, then the default socket and the admin key file.
func TestClientDefaults(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "wardend.sock")
	keyFile := filepath.Join(dir, "admin.key")
	os.WriteFile(keyFile, []byte("wdn_fromfile\n"), 0o600)

	for _, tc := range []struct {
		name      string
		flagURL   string
		flagKey   string
		env       map[string]string
		socket    bool
		keyFile   string
		wantURL   string
		wantKey   string
		keySource string
	}{
		{name: "defaults without socket", keyFile: filepath.Join(dir, "none"), wantURL: defaultURL},
		{name: "socket exists", socket: true, keyFile: keyFile, wantURL: "unix://" + sock, wantKey: "wdn_fromfile", keySource: keyFile},
		{name: "env wins over socket and file", socket: true, keyFile: keyFile,
			env:     map[string]string{"WARDEN_URL": "http://10.0.0.1:7070", "WARDEN_API_KEY": "wdn_env"},
			wantURL: "http://10.0.0.1:7070", wantKey: "wdn_env", keySource: "WARDEN_API_KEY"},
		{name: "flags win", flagURL: "http://h:1", flagKey: "wdn_flag", keyFile: keyFile,
			env:     map[string]string{"WARDEN_URL": "http://10.0.0.1:7070", "WARDEN_API_KEY": "wdn_env"},
			wantURL: "http://h:1", wantKey: "wdn_flag", keySource: "--api-key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(sock)
			if tc.socket {
				l, err := net.Listen("unix", sock)
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
			}
			env, _, _ := testEnv(t, "")
			env.SocketPath = sock
			env.AdminKeyFile = tc.keyFile
			env.Getenv = func(k string) string { return tc.env[k] }
			env.fill()
			r := &runner{env: env, cmd: &command{name: "warden"}, g: globalFlags{url: tc.flagURL, apiKey: tc.flagKey}}
			if _, err := r.client(); err != nil {
				t.Fatal(err)
			}
			if r.baseURL != tc.wantURL || r.keySource != tc.keySource {
				t.Errorf("url %q key source %q; want %q, %q", r.baseURL, r.keySource, tc.wantURL, tc.keySource)
			}
		})
	}
}

// TestAPIKeySent checks that the key reaches the daemon, here from the admin key file.
func TestAPIKeySent(t *testing.T) {
	d := newFakeDaemon(t)
	d.json("GET /v1/whoami", 200, warden.Identity{})
	env, _, errb := testEnv(t, "")
	os.WriteFile(env.AdminKeyFile, []byte(" wdn_admin \n"), 0o600)
	if code := Run(context.Background(), []string{"whoami", "--url", d.srv.URL}, env); code != 0 {
		t.Fatalf("code %d: %s", code, errb.String())
	}
	if d.auth[0] != "Bearer wdn_admin" {
		t.Errorf("Authorization %q", d.auth[0])
	}
}

// TestUnixSocket talks to the daemon over the default socket without any flag.
func TestUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "w.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, warden.Health{Status: "ok", Version: "v9.9.9"})
	}))
	srv.Listener = l
	srv.Start()
	defer srv.Close()
	env, out, _ := testEnv(t, "")
	env.SocketPath = sock
	if code := Run(context.Background(), []string{"version", "--json"}, env); code != 0 {
		t.Fatalf("code %d", code)
	}
	var v versionInfo
	mustJSON(t, out.String(), &v)
	if v.Server != "v9.9.9" || v.URL != "unix://"+sock || v.Client == "" {
		t.Errorf("%+v", v)
	}
}

func TestVersionDaemonDown(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	env, out, errb := testEnv(t, "")
	code := Run(context.Background(), []string{"version", "--url", "http://" + addr}, env)
	if code != 0 || !strings.Contains(out.String(), "server: unreachable: cannot reach wardend at http://"+addr+": connection refused") {
		t.Errorf("code %d stdout %q stderr %q", code, out.String(), errb.String())
	}
}

func TestConnectionRefusedHint(t *testing.T) {
	env, _, errb := testEnv(t, "")
	code := Run(context.Background(), []string{"sandbox", "ls", "--url", "unix://" + filepath.Join(t.TempDir(), "none.sock")}, env)
	if code != 1 || !strings.Contains(errb.String(), "no such file or directory\nhint: is wardend running? start it with 'sudo wardend'") {
		t.Errorf("code %d stderr %q", code, errb.String())
	}
}

func TestUnauthenticatedHint(t *testing.T) {
	d := newFakeDaemon(t)
	d.apiError("GET /v1/sandboxes", 401, "unauthenticated", "missing API key")
	res := run(t, d, "sandbox", "ls")
	want := "warden: list sandboxes: unauthenticated: missing API key (http 401, request req-1)\n" +
		"hint: set WARDEN_API_KEY or pass --api-key; the first admin key is in /var/lib/warden/admin.key\n"
	if res.code != 1 || res.stderr != want {
		t.Errorf("code %d stderr:\n%s\nwant:\n%s", res.code, res.stderr, want)
	}
}

func TestSandboxCreate(t *testing.T) {
	d := newFakeDaemon(t)
	var got warden.CreateSandboxRequest
	d.handle("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		json.NewDecoder(r.Body).Decode(&got)
		writeJSON(w, 201, warden.Sandbox{ID: "sb-new", State: warden.StateRunning})
	})
	env, out, errb := testEnv(t, "")
	env.Getenv = func(k string) string { return map[string]string{"TOKEN": "s3cret"}[k] }
	code := Run(context.Background(), []string{"--url", d.srv.URL, "sandbox", "create", "--template", "python", "--cpu", "0.5",
		"--memory", "256", "--disk", "1024", "--timeout", "1h", "--env", "A=1", "--env", "TOKEN", "--meta", "job=42",
		"--user", "root", "--workdir", "/app"}, env)
	if code != 0 || out.String() != "sb-new\n" {
		t.Fatalf("code %d stdout %q stderr %q", code, out.String(), errb.String())
	}
	want := warden.CreateSandboxRequest{Template: "python", CPUMillis: 500, MemoryMB: 256, DiskMB: 1024,
		Env: map[string]string{"A": "1", "TOKEN": "s3cret"}, Metadata: map[string]string{"job": "42"},
		TimeoutSeconds: 3600, User: "root", Workdir: "/app"}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		t.Errorf("request %s, want %s", gb, wb)
	}
}

func TestSandboxKillSeveral(t *testing.T) {
	d := newFakeDaemon(t)
	d.handle("DELETE /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") == "sb-bad" {
			writeJSON(w, 403, map[string]any{"error": map[string]string{"code": "forbidden", "message": "not yours"}})
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	res := run(t, d, "sandbox", "kill", "sb-1", "sb-bad", "sb-2")
	if res.code != 1 || res.stdout != "sb-1\nsb-2\n" || !strings.HasPrefix(res.stderr, "warden: kill sandbox sb-bad: forbidden: not yours") {
		t.Errorf("code %d stdout %q stderr %q", res.code, res.stdout, res.stderr)
	}
}

func TestSandboxTimeout(t *testing.T) {
	d := newFakeDaemon(t)
	var body map[string]int
	d.handle("POST /v1/sandboxes/sb-1/timeout", func(w http.ResponseWriter, r *http.Request) {
		json.NewDecoder(r.Body).Decode(&body)
		writeJSON(w, 200, warden.Sandbox{ID: "sb-1", ExpiresAt: testNow.Add(90 * time.Minute)})
	})
	res := run(t, d, "sandbox", "timeout", "sb-1", "90m")
	if res.code != 0 || body["timeout_seconds"] != 5400 || normalize(res.stdout) != "sb-1 expires at [time] (in 90m)\n" {
		t.Errorf("code %d body %v stdout %q stderr %q", res.code, body, res.stdout, res.stderr)
	}
}

func TestFsCommands(t *testing.T) {
	f := newFakeFS(t, "sb-1")
	writeFiles(t, f.roots["sb-1"], map[string]string{"d/x": "x", "f.txt": "hello"})
	f.handle("DELETE /v1/sandboxes/sb-1/files", func(w http.ResponseWriter, r *http.Request) {
		os.RemoveAll(f.in("sb-1", r.URL.Query().Get("path")))
		w.WriteHeader(http.StatusNoContent)
	})
	if res := run(t, f.fakeDaemon, "fs", "cat", "sb-1", "/f.txt"); res.stdout != "hello" || res.code != 0 {
		t.Errorf("cat: %+v", res)
	}
	res := run(t, f.fakeDaemon, "fs", "rm", "sb-1", "/d")
	if res.code != 1 || res.stderr != "warden: /d is a directory\nhint: pass -r to remove it with everything in it\n" {
		t.Errorf("rm dir without -r: %+v", res)
	}
	if _, err := os.Stat(f.in("sb-1", "/d/x")); err != nil {
		t.Error("rm without -r removed the directory")
	}
	if res := run(t, f.fakeDaemon, "fs", "rm", "-r", "sb-1", "/d"); res.code != 0 {
		t.Errorf("rm -r: %+v", res)
	}
	if _, err := os.Stat(f.in("sb-1", "/d")); err == nil {
		t.Error("rm -r left the directory")
	}
	if res := run(t, f.fakeDaemon, "fs", "rm", "sb-1", "/nope"); res.code != 1 {
		t.Errorf("rm missing: %+v", res)
	}
	if res := run(t, f.fakeDaemon, "fs", "rm", "-f", "sb-1", "/nope"); res.code != 0 {
		t.Errorf("rm -f missing: %+v", res)
	}

	var moved map[string]string
	f.handle("POST /v1/sandboxes/sb-1/fs/move", func(w http.ResponseWriter, r *http.Request) {
		json.NewDecoder(r.Body).Decode(&moved)
		writeJSON(w, 200, warden.Entry{Name: "g.txt", Path: "/g.txt", Type: "file", Mode: "0644"})
	})
	if res := run(t, f.fakeDaemon, "fs", "mv", "sb-1", "/f.txt", "/g.txt"); res.code != 0 || res.stdout != "" || moved["source"] != "/f.txt" || moved["destination"] != "/g.txt" {
		t.Errorf("mv: %+v %v", res, moved)
	}
	f.apiError("POST /v1/sandboxes/sb-1/fs/mkdir", 409, "conflict", "/g.txt exists")
	if res := run(t, f.fakeDaemon, "fs", "mkdir", "sb-1", "/g.txt"); res.code != 1 || !strings.Contains(res.stderr, "conflict: /g.txt exists") {
		t.Errorf("mkdir: %+v", res)
	}
}

func TestFsWatch(t *testing.T) {
	d := newFakeDaemon(t)
	d.handle("GET /v1/sandboxes/sb-1/fs/watch", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("recursive") != "true" {
			t.Errorf("watch -r should be recursive: %s", r.URL)
		}
		ndjson(w, map[string]any{"type": "start"},
			map[string]any{"type": "event", "event": "create", "name": "a.txt"},
			map[string]any{"type": "event", "event": "write", "name": "sub/b.txt"})
		<-r.Context().Done()
	})
	env, _, errb := testEnv(t, "")
	out := &lockedBuffer{}
	env.Stdout = out
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for !strings.Contains(out.String(), "sub/b.txt") {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	code := Run(ctx, []string{"--url", d.srv.URL, "fs", "watch", "-r", "sb-1", "/home"}, env)
	if code != 0 || out.String() != "create a.txt\nwrite  sub/b.txt\n" || errb.Len() != 0 {
		t.Errorf("code %d stdout %q stderr %q", code, out.String(), errb.String())
	}
}

func TestKeysAndPrincipals(t *testing.T) {
	d := newFakeDaemon(t)
	var keyReq warden.CreateKeyRequest
	d.handle("POST /v1/keys", func(w http.ResponseWriter, r *http.Request) {
		json.NewDecoder(r.Body).Decode(&keyReq)
		writeJSON(w, 201, warden.CreatedKey{Key: "wdn_a1b2c3d4_secret", APIKey: warden.APIKey{ID: "a1b2c3d4"}})
	})
	res := run(t, d, "keys", "create", "--principal", "pr-1", "--name", "ci", "--scope", "sandboxes:create,files:read", "--scope", "audit:read")
	if res.code != 0 || res.stdout != "wdn_a1b2c3d4_secret\n" || !strings.Contains(res.stderr, "only time") {
		t.Errorf("keys create: %+v", res)
	}
	if keyReq.PrincipalID != "pr-1" || keyReq.Name != "ci" || strings.Join(keyReq.Scopes, " ") != "sandboxes:create files:read audit:read" {
		t.Errorf("key request %+v", keyReq)
	}

	d.handle("DELETE /v1/keys/a1b2c3d4", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	if res := run(t, d, "keys", "revoke", "a1b2c3d4"); res.code != 0 || res.stdout != "a1b2c3d4\n" {
		t.Errorf("keys revoke: %+v", res)
	}

	var pReq warden.CreatePrincipalRequest
	d.handle("POST /v1/principals", func(w http.ResponseWriter, r *http.Request) {
		json.NewDecoder(r.Body).Decode(&pReq)
		writeJSON(w, 201, warden.Principal{ID: "pr-new", Kind: pReq.Kind, Name: pReq.Name})
	})
	if res := run(t, d, "principals", "create", "--kind", "agent", "ci-bot"); res.code != 0 || res.stdout != "pr-new\n" || pReq != (warden.CreatePrincipalRequest{Kind: "agent", Name: "ci-bot"}) {
		t.Errorf("principals create: %+v %+v", res, pReq)
	}
}

func TestAuditVerifyOK(t *testing.T) {
	d := newFakeDaemon(t)
	d.json("GET /v1/audit/verify", 200, warden.VerifyReport{OK: true, Checked: 120})
	if res := run(t, d, "audit", "verify"); res.code != 0 || res.stdout != "audit log ok: 120 events checked\n" {
		t.Errorf("%+v", res)
	}
	res := run(t, d, "audit", "verify", "--json")
	var rep warden.VerifyReport
	mustJSON(t, res.stdout, &rep)
	if res.code != 0 || !rep.OK || rep.Problems == nil {
		t.Errorf("%+v %+v", res, rep)
	}
}

func TestAuditLsQuery(t *testing.T) {
	d := newFakeDaemon(t)
	d.json("GET /v1/audit", 200, warden.AuditPage{Events: []warden.AuditEvent{{Seq: 11}, {Seq: 12}}, NextAfter: 12})
	res := run(t, d, "audit", "ls", "--after", "10", "--limit", "2", "--target", "sb-1", "--principal", "pr-1")
	if res.code != 0 || res.stderr != "(more events may follow: --after 12)\n" {
		t.Errorf("%+v", res)
	}
	if reqs := d.requests(); reqs[0] != "GET /v1/audit?after=10&limit=2&principal=pr-1&target=sb-1" {
		t.Errorf("request %q", reqs[0])
	}
}
