package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

func TestMain(m *testing.M) {
	time.Local = time.UTC // absolute times in goldens do not depend on the machine
	os.Exit(m.Run())
}

// testNow is the clock of every test run: ages in tables are relative to it.
var testNow = time.Date(2025, 1, 2, 15, 10, 0, 0, time.UTC)

// result is what one in-process run of warden produced.
type result struct {
	stdout, stderr string
	code           int
}

// fakeDaemon is an HTTP server standing in for wardend; tests add the routes they need.
type fakeDaemon struct {
	t   *testing.T
	srv *httptest.Server
	mux *http.ServeMux

	mu   sync.Mutex
	reqs []string // "METHOD /path?query" of every request
	auth []string // Authorization header of every request
}

func newFakeDaemon(t *testing.T) *fakeDaemon {
	t.Helper()
	d := &fakeDaemon{t: t, mux: http.NewServeMux()}
	d.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		d.reqs = append(d.reqs, r.Method+" "+r.URL.RequestURI())
		d.auth = append(d.auth, r.Header.Get("Authorization"))
		d.mu.Unlock()
		d.mux.ServeHTTP(w, r)
	}))
	t.Cleanup(d.srv.Close)
	return d
}

func (d *fakeDaemon) handle(pattern string, h http.HandlerFunc) { d.mux.HandleFunc(pattern, h) }

// json answers pattern with v as JSON.
func (d *fakeDaemon) json(pattern string, status int, v any) {
	d.handle(pattern, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, status, v) })
}

// apiError answers pattern with a Warden error body.
func (d *fakeDaemon) apiError(pattern string, status int, code, msg string) {
	d.json(pattern, status, map[string]any{"error": map[string]string{"code": code, "message": msg, "request_id": "req-1"}})
}

func (d *fakeDaemon) requests() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.reqs...)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// testEnv returns an Env with a fixed clock, no environment, and default paths that do
// not exist, so that nothing outside the test leaks in.
func testEnv(t *testing.T, stdin string) (Env, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	dir := t.TempDir()
	return Env{
		Stdin:        strings.NewReader(stdin),
		Stdout:       &out,
		Stderr:       &errb,
		Getenv:       func(string) string { return "" },
		Now:          func() time.Time { return testNow },
		SocketPath:   filepath.Join(dir, "no.sock"),
		AdminKeyFile: filepath.Join(dir, "no.key"),
	}, &out, &errb
}

// run runs warden in-process against d (when not nil) with args.
func run(t *testing.T, d *fakeDaemon, args ...string) result {
	t.Helper()
	return runIn(t, d, "", args...)
}

// runIn is run with stdin.
func runIn(t *testing.T, d *fakeDaemon, stdin string, args ...string) result {
	t.Helper()
	env, out, errb := testEnv(t, stdin)
	if d != nil {
		args = append([]string{"--url", d.srv.URL, "--api-key", "wdn_test"}, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := Run(ctx, args, env)
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

var (
	rfc3339Re   = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
	shortTimeRe = regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d`)
)

// normalize replaces absolute times with placeholders, so that goldens hold only what
// does not depend on when and where the test ran: RFC 3339 times become [time], and the
// minute-precision times of tables become YYYY-MM-DD hh:mm, which keeps columns aligned.
func normalize(s string) string {
	s = rfc3339Re.ReplaceAllString(s, "[time]")
	return shortTimeRe.ReplaceAllString(s, "YYYY-MM-DD hh:mm")
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/cli -run %s -update to create it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (rerun with -update if the change is intended)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// mustJSON decodes s into v or fails the test.
func mustJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, s)
	}
}

// lockedBuffer is a bytes.Buffer safe to read while a command writes to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// readAll reads r to the end or fails the test.
func readAll(t *testing.T, r io.Reader) []byte {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
