package warden

// These tests use httptest servers only for client mechanics a real daemon cannot easily be
// made to show: retries and backoff, error bodies, malformed or truncated streams,
// cancellation and unix-socket addressing. End-to-end behaviour is tested against the
// real daemon elsewhere.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fastRetry keeps backoff short so that tests run quickly.
var fastRetry = RetryPolicy{MaxAttempts: 4, MinDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}

func newTestClient(t *testing.T, h http.Handler, opts ...Option) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := New(append([]Option{WithBaseURL(srv.URL), WithAPIKey("wdn_test"), WithRetry(fastRetry)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Request-Id", "req-1")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":{"code":%q,"message":%q,"request_id":"req-1"}}`, code, msg)
}

const sandboxJSON = `{"id":"sb-1","state":"running","created_at":"2025-01-02T15:04:05Z","ended_at":null,"end_reason":null}`

func TestRetryHonoursRetryAfter(t *testing.T) {
	var calls atomic.Int32
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			writeError(w, 503, CodeUnavailable, "busy")
			return
		}
		io.WriteString(w, sandboxJSON)
	}))
	start := time.Now()
	sb, err := c.GetSandbox(context.Background(), "sb-1")
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != "sb-1" || sb.State != StateRunning || sb.EndedAt != nil {
		t.Errorf("sandbox = %+v", sb)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("calls = %d, want 2", n)
	}
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Errorf("retried after %v, want Retry-After's 1s", d)
	}
}

func TestRetryOn429WithBackoff(t *testing.T) {
	var calls atomic.Int32
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			writeError(w, 429, CodeRateLimited, "slow down")
			return
		}
		io.WriteString(w, `{"processes":[{"pid":7,"tag":"web","cmd":["sleep","1"],"user":"user","exited":false}]}`)
	}))
	ps, err := c.Processes(context.Background(), "sb-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].PID != 7 || ps[0].Tag != "web" {
		t.Errorf("processes = %+v", ps)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("calls = %d, want 3", n)
	}
}

func TestRetryIsBounded(t *testing.T) {
	var calls atomic.Int32
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		writeError(w, 503, CodeUnavailable, "shutting down")
	}))
	err := c.KillSandbox(context.Background(), "sb-1")
	var e *Error
	if !errors.As(err, &e) || e.Status != 503 || e.Code != CodeUnavailable {
		t.Fatalf("err = %v, want a 503 *Error", err)
	}
	if n := calls.Load(); n != int32(fastRetry.MaxAttempts) {
		t.Errorf("calls = %d, want %d", n, fastRetry.MaxAttempts)
	}
}

func TestNoRetryForNonIdempotentPost(t *testing.T) {
	var calls atomic.Int32
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		writeError(w, 429, CodeRateLimited, "slow down")
	}))
	_, err := c.CreateSandbox(context.Background(), CreateSandboxRequest{Template: "base"})
	if !IsRateLimited(err) {
		t.Fatalf("err = %v, want rate_limited", err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("calls = %d, want 1", n)
	}
}

func TestIdempotentPostIsRetriedWithSameBody(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		n := len(bodies)
		mu.Unlock()
		if n == 1 {
			writeError(w, 503, CodeUnavailable, "busy")
			return
		}
		io.WriteString(w, sandboxJSON)
	}))
	if _, err := c.SetTimeout(context.Background(), "sb-1", 600); err != nil {
		t.Fatal(err)
	}
	want := `{"timeout_seconds":600}`
	if len(bodies) != 2 || bodies[0] != want || bodies[1] != want {
		t.Errorf("bodies = %q, want two of %q", bodies, want)
	}
}

func TestUploadRetryRewindsSeekableBody(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		n := len(bodies)
		mu.Unlock()
		if n == 1 {
			writeError(w, 503, CodeUnavailable, "busy")
			return
		}
		io.WriteString(w, `{"name":"a.txt","path":"/a.txt","type":"file","size":5,"mode":"0600"}`)
	}))
	r := strings.NewReader("xxhello")
	r.Seek(2, io.SeekStart) // start mid-reader: the retry must rewind to here, not to 0
	e, err := c.WriteFile(context.Background(), "sb-1", "/a.txt", r, WriteOptions{Mode: 0o600})
	if err != nil {
		t.Fatal(err)
	}
	if len(bodies) != 2 || bodies[0] != "hello" || bodies[1] != "hello" {
		t.Errorf("bodies = %q, want two of hello", bodies)
	}
	if m, err := e.FileMode(); err != nil || m != 0o600 {
		t.Errorf("mode = %v, %v", m, err)
	}
}

func TestUploadOfOneShotReaderIsNotRetried(t *testing.T) {
	var calls atomic.Int32
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		io.Copy(io.Discard, r.Body)
		writeError(w, 503, CodeUnavailable, "busy")
	}))
	r := io.MultiReader(strings.NewReader("tar bytes")) // not an io.Seeker
	err := c.UploadArchive(context.Background(), "sb-1", "/dir", r)
	if err == nil {
		t.Fatal("upload succeeded")
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("calls = %d, want 1", n)
	}
}

func TestRetryAfterLongerThanPolicyIsNotWaited(t *testing.T) {
	var calls atomic.Int32
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Retry-After", "3600")
		writeError(w, 429, CodeRateLimited, "slow down")
	}))
	start := time.Now()
	_, err := c.Whoami(context.Background())
	if !IsRateLimited(err) {
		t.Fatalf("err = %v", err)
	}
	if calls.Load() != 1 || time.Since(start) > 2*time.Second {
		t.Errorf("calls = %d after %v; want one call, no wait", calls.Load(), time.Since(start))
	}
}

func TestRetryAfterBeyondDeadlineReturnsAtOnce(t *testing.T) {
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "5")
		writeError(w, 503, CodeUnavailable, "busy")
	}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.VerifyAudit(ctx)
	var e *Error
	if !errors.As(err, &e) || e.Status != 503 {
		t.Fatalf("err = %v, want the 503", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("returned after %v", d)
	}
}

func TestCancelDuringBackoff(t *testing.T) {
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "10")
		writeError(w, 503, CodeUnavailable, "busy")
	}))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := c.ListKeys(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("returned after %v", d)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 2, 15, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"0", 0, true},
		{"7", 7 * time.Second, true},
		{"-1", 0, false},
		{"soon", 0, false},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
	} {
		got, ok := parseRetryAfter(tc.in, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestBackoffGrowsAndIsCapped(t *testing.T) {
	p := RetryPolicy{MinDelay: 100 * time.Millisecond, MaxDelay: time.Second}.withDefaults()
	for n, hi := range map[int]time.Duration{1: 100, 2: 200, 3: 400, 4: 800, 5: 1000, 30: 1000} {
		hi *= time.Millisecond
		for range 50 {
			if d := p.backoff(n); d < hi/2 || d > hi {
				t.Fatalf("backoff(%d) = %v, want in [%v, %v]", n, d, hi/2, hi)
			}
		}
	}
}

func TestErrorDecoding(t *testing.T) {
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("path") {
		case "/json":
			writeError(w, 404, CodeNotFound, "no such file /json")
		case "/proxy":
			w.Header().Set("X-Request-Id", "req-proxy")
			http.Error(w, "bad gateway", http.StatusBadGateway)
		case "/empty":
			w.WriteHeader(http.StatusConflict)
		}
	}), WithRetry(RetryPolicy{MaxAttempts: 1}))
	ctx := context.Background()

	_, err := c.Stat(ctx, "sb-1", "/json")
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v, not an *Error", err)
	}
	want := Error{Status: 404, Code: CodeNotFound, Message: "no such file /json", RequestID: "req-1"}
	if *e != want {
		t.Errorf("error = %+v, want %+v", *e, want)
	}
	if !IsNotFound(err) || IsConflict(err) || IsForbidden(err) || IsUnauthenticated(err) {
		t.Errorf("predicates wrong for %v", err)
	}
	if s := err.Error(); !strings.Contains(s, "stat /json in sandbox sb-1: not_found: no such file /json (http 404, request req-1)") {
		t.Errorf("message = %q", s)
	}

	_, err = c.Stat(ctx, "sb-1", "/proxy")
	if !errors.As(err, &e) || e.Status != 502 || e.Code != "" || e.Message != "bad gateway" || e.RequestID != "req-proxy" {
		t.Errorf("proxy error = %+v", e)
	}

	_, err = c.Stat(ctx, "sb-1", "/empty")
	if !IsConflict(err) {
		t.Errorf("empty 409 body: IsConflict(%v) = false", err)
	}

	for _, tc := range []struct {
		err  error
		pred func(error) bool
	}{
		{&Error{Status: 401, Code: CodeUnauthenticated}, IsUnauthenticated},
		{&Error{Status: 403, Code: CodeForbidden}, IsForbidden},
		{fmt.Errorf("wrapped: %w", &Error{Code: CodeConflict}), IsConflict},
	} {
		if !tc.pred(tc.err) {
			t.Errorf("predicate false for %v", tc.err)
		}
	}
	if IsNotFound(errors.New("not_found")) || IsNotFound(nil) {
		t.Error("IsNotFound true for a non-API error")
	}
}

// ndjsonServer answers every request with the given stream body and counts requests.
func ndjsonServer(t *testing.T, body string, calls *atomic.Int32, opts ...Option) *Client {
	return newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/x-ndjson")
		io.WriteString(w, body)
	}), opts...)
}

func TestExecDecodesStream(t *testing.T) {
	var calls atomic.Int32
	c := ndjsonServer(t, `{"type":"start","pid":12}

{"type":"stdout","data":"aGVsbG8g"}
{"type":"stderr","data":"b29wcw=="}
{"type":"pty","data":"d29ybGQ="}
  {"type":"unknown-future-event"}
{"type":"end","exit_code":3,"signal":0,"status":"exit status 3","error":""}
`, &calls)
	var stdout, stderr bytes.Buffer
	res, err := c.Exec(context.Background(), "sb-1", ExecRequest{Command: "x"}, ExecIO{Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	if stdout.String() != "hello world" || stderr.String() != "oops" {
		t.Errorf("stdout %q, stderr %q", stdout.String(), stderr.String())
	}
	want := ExitResult{ExitCode: 3, Status: "exit status 3"}
	if res != want || res.Success() {
		t.Errorf("result = %+v, want %+v", res, want)
	}
}

func TestProcessStreamEvents(t *testing.T) {
	var calls atomic.Int32
	c := ndjsonServer(t, `{"type":"start","pid":12}
{"type":"stdout","data":"aGk="}
{"type":"end","exit_code":0,"signal":0,"status":"exit status 0","error":""}
`, &calls)
	s, err := c.StreamProcess(context.Background(), "sb-1", 12, true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var types []string
	for ev, err := range s.Events() {
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, ev.Type)
	}
	if got := strings.Join(types, ","); got != "start,stdout,end" {
		t.Errorf("events = %s", got)
	}
	if res, ok := s.Result(); !ok || !res.Success() || s.PID() != 12 {
		t.Errorf("result = %+v, %v; pid %d", res, ok, s.PID())
	}
	if _, err := s.Next(); err != io.EOF {
		t.Errorf("Next after end = %v, want io.EOF", err)
	}
}

func TestStreamErrorEvent(t *testing.T) {
	var calls atomic.Int32
	c := ndjsonServer(t, `{"type":"start","pid":12}
{"type":"stdout","data":"aGk="}
{"type":"error","code":"internal","message":"agent connection lost"}
`, &calls)
	_, err := c.Exec(context.Background(), "sb-1", ExecRequest{Cmd: []string{"x"}}, ExecIO{})
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeInternal || e.Message != "agent connection lost" || e.Status != 0 {
		t.Fatalf("err = %v (%+v)", err, e)
	}
}

func TestTruncatedStreamIsNotRetried(t *testing.T) {
	var calls atomic.Int32
	c := ndjsonServer(t, `{"type":"start","pid":12}
{"type":"stdout","data":"aGk="}
`, &calls)
	_, err := c.Exec(context.Background(), "sb-1", ExecRequest{Cmd: []string{"x"}}, ExecIO{})
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want io.ErrUnexpectedEOF", err)
	}
	s, err := c.StreamProcess(context.Background(), "sb-1", 12, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Copy(nil, nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Copy err = %v, want io.ErrUnexpectedEOF", err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("calls = %d, want 2 (one per call, no retries)", n)
	}
}

func TestStreamLineLimit(t *testing.T) {
	var calls atomic.Int32
	big := strings.Repeat("A", 4096)
	c := ndjsonServer(t, `{"type":"start","pid":12}
{"type":"stdout","data":"`+big+`"}
`, &calls, WithMaxEventSize(1024))
	_, err := c.Exec(context.Background(), "sb-1", ExecRequest{Cmd: []string{"x"}}, ExecIO{})
	if !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("err = %v, want ErrEventTooLarge", err)
	}
}

func TestStreamBadJSON(t *testing.T) {
	var calls atomic.Int32
	c := ndjsonServer(t, "{\"type\":\"start\",\"pid\":12}\nnot json\n", &calls)
	_, err := c.Exec(context.Background(), "sb-1", ExecRequest{Cmd: []string{"x"}}, ExecIO{})
	if err == nil || !strings.Contains(err.Error(), "decode stream event") {
		t.Fatalf("err = %v", err)
	}
}

func TestWatchErrorEvent(t *testing.T) {
	var calls atomic.Int32
	c := ndjsonServer(t, `{"type":"start"}
{"type":"event","event":"create","name":"a/b.txt"}
{"type":"error","code":"unavailable","message":"watch lost"}
`, &calls)
	w, err := c.Watch(context.Background(), "sb-1", "/home/user", true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var got []string
	var last error
	for ev, err := range w.Events() {
		if err != nil {
			last = err
			break
		}
		got = append(got, ev.Event+" "+ev.Name)
	}
	if strings.Join(got, ";") != "create a/b.txt" {
		t.Errorf("events = %q", got)
	}
	var e *Error
	if !errors.As(last, &e) || e.Code != CodeUnavailable {
		t.Errorf("last = %v", last)
	}
}

func TestExecContextCancel(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"type":"start","pid":12}`+"\n")
		w.(http.Flusher).Flush()
		select { // a process that never ends
		case <-release:
		case <-r.Context().Done():
		}
	}))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := c.Exec(ctx, "sb-1", ExecRequest{Cmd: []string{"sleep", "inf"}}, ExecIO{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("returned after %v", d)
	}
}

func TestReadFileRangeWhenServerSendsWholeFile(t *testing.T) {
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") != "bytes=2-4" {
			t.Errorf("Range = %q", r.Header.Get("Range"))
		}
		io.WriteString(w, "0123456789") // ignores Range: 200 with everything
	}))
	rc, err := c.ReadFile(context.Background(), "sb-1", "/f", ReadOptions{Offset: 2, Length: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	if string(b) != "234" {
		t.Errorf("read %q, want 234", b)
	}
}

func listenUnix(t *testing.T, path string, h http.Handler) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
}

func TestUnixSocketURL(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "wardend.sock")
	listenUnix(t, sock, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != "wardend" || r.URL.Path != "/v1/whoami" {
			t.Errorf("request %s %s", r.Host, r.URL.Path)
		}
		if got := r.Header.Get("Authorization"); got != "Bearer wdn_env" {
			t.Errorf("Authorization = %q", got)
		}
		if ua := r.Header.Get("User-Agent"); ua != "warden-go" {
			t.Errorf("User-Agent = %q", ua)
		}
		io.WriteString(w, `{"principal":{"id":"pr-1","kind":"agent","name":"a","created_by":null},"key":{"id":"k1","scopes":["admin"],"revoked_at":null}}`)
	}))
	t.Setenv(EnvURL, "unix://"+sock)
	t.Setenv(EnvAPIKey, "wdn_env")
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if c.BaseURL() != "http://wardend" {
		t.Errorf("BaseURL = %q", c.BaseURL())
	}
	id, err := c.Whoami(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if id.Principal.ID != "pr-1" || id.Principal.CreatedBy != "" || id.Key.Scopes[0] != ScopeAdmin || id.Key.RevokedAt != nil {
		t.Errorf("identity = %+v", id)
	}
}

func TestConnectionRefusedIsRetried(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "late.sock")
	var calls atomic.Int32
	time.AfterFunc(150*time.Millisecond, func() {
		listenUnix(t, sock, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, sandboxJSON)
		}))
	})
	c, err := New(WithBaseURL("unix://"+sock), WithRetry(RetryPolicy{MaxAttempts: 8, MinDelay: 50 * time.Millisecond, MaxDelay: 200 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	// Even a non-idempotent call is retried: the request never reached the daemon.
	sb, err := c.CreateSandbox(context.Background(), CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID != "sb-1" || calls.Load() != 1 {
		t.Errorf("sandbox %q after %d calls", sb.ID, calls.Load())
	}
}

func TestNewRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"ftp://x", "unix://", "http://", "127.0.0.1:7070", "://"} {
		if _, err := New(WithBaseURL(u)); err == nil {
			t.Errorf("New(%q) succeeded", u)
		}
	}
	c, err := New(WithBaseURL("https://example.test/warden/"), WithAPIKey(""))
	if err != nil || c.BaseURL() != "https://example.test/warden" {
		t.Errorf("BaseURL = %q, %v", c.BaseURL(), err)
	}
}

func TestPorts(t *testing.T) {
	var mu sync.Mutex
	var reqs []string
	c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		reqs = append(reqs, r.Method+" "+r.URL.Path+" "+string(b))
		mu.Unlock()
		switch r.URL.Path {
		case "/v1/sandboxes/sb-1/ports/8000/url":
			io.WriteString(w, `{"url":"http://d/v1/sandboxes/sb-1/ports/8000/proxy/?warden_token=1.x","host_url":"http://8000-sb-1.p.example/?warden_token=1.x","expires_at":"2025-01-02T15:09:06Z","public":false}`)
		case "/v1/sandboxes/sb-1/ports/8000":
			io.WriteString(w, `{"sandbox_id":"sb-1","port":8000,"public":true,"url":"http://d/v1/sandboxes/sb-1/ports/8000/proxy/"}`)
		default:
			writeError(w, 404, CodeNotFound, "no")
		}
	}))
	ctx := context.Background()
	p, err := c.PreviewURL(ctx, "sb-1", 8000, 90*time.Minute+time.Millisecond)
	if err != nil || p.HostURL != "http://8000-sb-1.p.example/?warden_token=1.x" || p.ExpiresAt.IsZero() {
		t.Fatalf("PreviewURL = %+v, %v", p, err)
	}
	if _, err := c.PreviewURL(ctx, "sb-1", 8000, 0); err != nil {
		t.Fatal(err)
	}
	port, err := c.PublishPort(ctx, "sb-1", 8000, true)
	if err != nil || !port.Public || port.Port != 8000 {
		t.Fatalf("PublishPort = %+v, %v", port, err)
	}
	if _, err := c.PublishPort(ctx, "sb-1", 8000, false); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`POST /v1/sandboxes/sb-1/ports/8000/url {"expires_seconds":5401}`,
		`POST /v1/sandboxes/sb-1/ports/8000/url {}`,
		`POST /v1/sandboxes/sb-1/ports/8000 {"public":true}`,
		`POST /v1/sandboxes/sb-1/ports/8000 {"public":false}`,
	}
	if strings.Join(reqs, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(reqs, "\n"), strings.Join(want, "\n"))
	}
	_, err = c.PublishPort(ctx, "sb-2", 8000, false)
	if !IsNotFound(err) || !strings.Contains(err.Error(), "unpublish port 8000 of sandbox sb-2") {
		t.Errorf("error = %v", err)
	}
}
