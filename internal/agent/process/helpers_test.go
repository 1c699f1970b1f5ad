package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/agent/sysuser"
	pb "github.com/warden-sandbox/warden/internal/agentpb/process"
	"github.com/warden-sandbox/warden/internal/agentpb/process/processpbconnect"
)

// Test fixture, set up by TestMain.
var (
	baseDir  string // world-traversable temp dir
	userHome string // home of "user" (uid 1000), owned by it
	rootHome string
	isRoot   = os.Geteuid() == 0
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	var err error
	baseDir, err = os.MkdirTemp("", "warden-process-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(baseDir)
	os.Chmod(baseDir, 0o755)
	userHome = filepath.Join(baseDir, "home", "user")
	rootHome = filepath.Join(baseDir, "root")
	for _, d := range []string{userHome, rootHome} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if isRoot {
		os.Chown(userHome, 1000, 1000)
	}
	passwd := fmt.Sprintf("root:x:0:0:root:%s:/bin/sh\nuser:x:1000:1000:user:%s:/bin/bash\n", rootHome, userHome)
	group := "root:x:0:\nuser:x:1000:\nextra:x:2000:user\n"
	sysuser.PasswdFile = filepath.Join(baseDir, "passwd")
	sysuser.GroupFile = filepath.Join(baseDir, "group")
	os.WriteFile(sysuser.PasswdFile, []byte(passwd), 0o644)
	os.WriteFile(sysuser.GroupFile, []byte(group), 0o644)
	// Something of the agent's own environment that must never leak.
	os.Setenv("WARDEN_AGENT_SECRET", "leaked")
	// Orphans of the processes under test are reparented to this test
	// process, as they would be to the agent as PID 1, so the reaper must
	// reap them.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "warning: PR_SET_CHILD_SUBREAPER:", err)
	}
	return m.Run()
}

func needRoot(t *testing.T) {
	t.Helper()
	if !isRoot {
		t.Skip("SKIPPED LOUDLY: this test switches users and needs root; run the tests as root (CI does)")
	}
}

// testEnv is a service served over h2c (or HTTP/1.1) and a client for it.
type testEnv struct {
	svc    *Service
	srv    *httptest.Server
	hc     *http.Client
	client processpbconnect.ProcessClient
}

type envOpts struct {
	cfg   Config
	json  bool
	http1 bool
}

func newEnv(t *testing.T, o envOpts) *testEnv {
	t.Helper()
	if o.cfg.DefaultUser == "" {
		o.cfg.DefaultUser = "root"
	}
	svc := New(o.cfg)
	mux := http.NewServeMux()
	mux.Handle(processpbconnect.NewProcessHandler(svc))
	srv := httptest.NewUnstartedServer(mux)
	var sp, cp http.Protocols
	sp.SetHTTP1(true)
	sp.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = &sp
	srv.Start()
	if o.http1 {
		cp.SetHTTP1(true)
	} else {
		cp.SetUnencryptedHTTP2(true)
	}
	hc := &http.Client{Transport: &http.Transport{Protocols: &cp}}
	var opts []connect.ClientOption
	if o.json {
		opts = append(opts, connect.WithProtoJSON())
	}
	e := &testEnv{svc: svc, srv: srv, hc: hc, client: processpbconnect.NewProcessClient(hc, srv.URL, opts...)}
	t.Cleanup(e.close)
	return e
}

func (e *testEnv) close() {
	e.svc.Close()
	e.hc.CloseIdleConnections()
	e.srv.CloseClientConnections()
	e.srv.Close()
}

// forCodecs runs f against a fresh service with the binary proto codec and
// with the JSON codec (what E2B's SDKs use).
func forCodecs(t *testing.T, cfg Config, f func(t *testing.T, e *testEnv)) {
	for _, json := range []bool{false, true} {
		name := "proto"
		if json {
			name = "json"
		}
		t.Run(name, func(t *testing.T) {
			f(t, newEnv(t, envOpts{cfg: cfg, json: json}))
		})
	}
}

// result is what a Start or Connect stream delivered.
type result struct {
	pid        uint32
	stdout     bytes.Buffer
	stderr     bytes.Buffer
	pty        bytes.Buffer
	keepalives int
	end        *pb.ProcessEvent_EndEvent
	err        error
}

func (r *result) output() string { return r.stdout.String() + r.stderr.String() + r.pty.String() }

type eventer interface{ GetEvent() *pb.ProcessEvent }

// streamReader checks the event order of a stream as it reads it.
type streamReader[T any] struct {
	t      *testing.T
	s      *connect.ServerStreamForClient[T]
	r      result
	events int
}

func newReader[T any](t *testing.T, s *connect.ServerStreamForClient[T]) *streamReader[T] {
	return &streamReader[T]{t: t, s: s}
}

// next reads one event; false at the end of the stream.
func (sr *streamReader[T]) next() bool {
	t := sr.t
	t.Helper()
	if !sr.s.Receive() {
		sr.r.err = sr.s.Err()
		return false
	}
	ev := any(sr.s.Msg()).(eventer).GetEvent()
	sr.events++
	if sr.r.end != nil {
		t.Errorf("event after end: %v", ev)
	}
	switch v := ev.GetEvent().(type) {
	case *pb.ProcessEvent_Start:
		if sr.events != 1 {
			t.Errorf("start is event %d, want 1", sr.events)
		}
		sr.r.pid = v.Start.GetPid()
	case *pb.ProcessEvent_Data:
		switch d := v.Data.GetOutput().(type) {
		case *pb.ProcessEvent_DataEvent_Stdout:
			sr.r.stdout.Write(d.Stdout)
		case *pb.ProcessEvent_DataEvent_Stderr:
			sr.r.stderr.Write(d.Stderr)
		case *pb.ProcessEvent_DataEvent_Pty:
			sr.r.pty.Write(d.Pty)
		}
	case *pb.ProcessEvent_Keepalive:
		sr.r.keepalives++
	case *pb.ProcessEvent_End:
		sr.r.end = v.End
	default:
		t.Errorf("unexpected event %v", ev)
	}
	if sr.events == 1 && sr.r.pid == 0 {
		t.Errorf("first event is not start: %v", ev)
	}
	return true
}

// until reads until cond holds; it fails the test if the stream ends first.
func (sr *streamReader[T]) until(cond func(r *result) bool) {
	sr.t.Helper()
	for !cond(&sr.r) {
		if !sr.next() {
			sr.t.Fatalf("stream ended (err %v) before condition; output %q", sr.r.err, sr.r.output())
		}
	}
}

func (sr *streamReader[T]) all() *result {
	sr.t.Helper()
	for sr.next() {
	}
	sr.s.Close()
	return &sr.r
}

func startReq(cmd string, args ...string) *connect.Request[pb.StartRequest] {
	return connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: cmd, Args: args}})
}

func sh(script string) *connect.Request[pb.StartRequest] { return startReq("/bin/sh", "-c", script) }

func asUser(req interface{ Header() http.Header }, user string) {
	req.Header().Set("Authorization", sysuser.BasicAuth(user))
}

// run starts a process and collects its whole stream; the stream must end
// with an end event.
func run(t *testing.T, e *testEnv, req *connect.Request[pb.StartRequest]) *result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := e.client.Start(ctx, req)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	r := newReader(t, s).all()
	if r.err != nil {
		t.Fatalf("stream error: %v (output %q)", r.err, r.output())
	}
	if r.end == nil {
		t.Fatalf("stream ended without end event (output %q)", r.output())
	}
	return r
}

// startErr starts a process that must fail with code before any event.
func startErr(t *testing.T, e *testEnv, req *connect.Request[pb.StartRequest], code connect.Code) error {
	t.Helper()
	s, err := e.client.Start(context.Background(), req)
	if err == nil {
		r := newReader(t, s).all()
		err = r.err
		if r.pid != 0 {
			t.Errorf("got a start event (pid %d) for a failing start", r.pid)
		}
	}
	if connect.CodeOf(err) != code {
		t.Fatalf("error %v, want code %v", err, code)
	}
	if msg := err.Error(); strings.ToLower(msg) != msg {
		t.Logf("note: error has capitals: %q", msg)
	}
	return err
}

func pidSel(pid uint32) *pb.ProcessSelector {
	return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
}

func tagSel(tag string) *pb.ProcessSelector {
	return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}}
}

func sendSignal(t *testing.T, e *testEnv, sel *pb.ProcessSelector, sig pb.Signal) error {
	t.Helper()
	_, err := e.client.SendSignal(context.Background(), connect.NewRequest(&pb.SendSignalRequest{Process: sel, Signal: sig}))
	return err
}

func connectTo(t *testing.T, e *testEnv, ctx context.Context, sel *pb.ProcessSelector, replay bool) *streamReader[pb.ConnectResponse] {
	t.Helper()
	s, err := e.client.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: sel, Replay: replay}))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return newReader(t, s)
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// exists reports whether pid exists at all (zombies included).
func exists(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return !errors.Is(err, os.ErrNotExist)
}

func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
