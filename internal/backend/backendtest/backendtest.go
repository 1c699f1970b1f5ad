// Package backendtest is the conformance suite every isolation backend runs
// (modelled on containerd's snapshots testsuite): lifecycle, exec, stdin,
// signals, PTY, files, watch, isolation checks, the escape and abuse probes
// of docs/probes.md with host canaries (probes.go), limits,
// restart recovery and teardown. A backend is done when Run passes against
// it for real.
package backendtest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/warden-sandbox/warden/internal/agentclient"
	fspb "github.com/warden-sandbox/warden/internal/agentpb/filesystem"
	"github.com/warden-sandbox/warden/internal/backend"
)

// Factory tells the suite how to make and inspect a backend.
type Factory struct {
	// New returns a backend. Called again to simulate a daemon restart: the
	// new instance must share the old one's configuration and state paths.
	New func(t *testing.T) backend.Backend
	// Spec returns a spec for a sandbox of the default template.
	Spec func(t *testing.T, id string) backend.Spec
	// Leftovers lists host resources still held for sandbox id (processes,
	// mounts, cgroups, directories, devices). Empty after Delete.
	Leftovers func(t *testing.T, id string) []string
	// HostPaths (optional) lists host paths of the backend that must be
	// invisible from inside sandbox h: its state and run directories, the
	// agent's socket, binaries, databases and configuration. The Probes
	// subtest passes them to warden-probe (sockets are also dialled).
	HostPaths func(t *testing.T, h backend.Handle) []string
	// HostDisk (optional) lists the host files that hold sandbox h's
	// writable data on the host's disk (its disk image), none when the
	// backend keeps it in memory. With it, probe 24 (filling the disk)
	// checks what those files take on the host; without it, the host's
	// free space, which other processes change too.
	HostDisk func(t *testing.T, h backend.Handle) []string
	// Unconfined marks a backend whose sandbox processes run on the host as
	// the user running the test, with no root filesystem, users or hostname
	// of their own (the fake backend). The suite then leaves out its checks
	// of those (the template's users, tools and hostname, root's private
	// files, a kill of every process from inside) and finds the home and
	// temporary directories in $HOME and $TMPDIR instead of at /home/user
	// and /tmp.
	Unconfined bool
}

var seq atomic.Int64

func newID(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano()%1e6, seq.Add(1))
}

// Sandbox is a started sandbox under test.
type Sandbox struct {
	B      backend.Backend
	H      backend.Handle
	Client *agentclient.Client

	home, tmp string // the default user's home and the temporary directory, once asked
}

// dirs returns the default user's home and the temporary directory of the
// sandbox: /home/user and /tmp, or for an unconfined backend what the
// sandbox's processes find in $HOME and $TMPDIR.
func (s *Sandbox) dirs(t *testing.T, f Factory) (home, tmp string) {
	t.Helper()
	if s.home == "" {
		s.home, s.tmp = "/home/user", "/tmp"
		if f.Unconfined {
			out := s.Sh(t, "", `printf '%s\n%s' "$HOME" "${TMPDIR:-/tmp}"`)
			s.home, s.tmp, _ = strings.Cut(out, "\n")
		}
	}
	return s.home, s.tmp
}

// Start creates and starts a sandbox, registering its deletion.
func Start(t *testing.T, f Factory, b backend.Backend, mutate func(*backend.Spec)) *Sandbox {
	t.Helper()
	ctx := context.Background()
	spec := f.Spec(t, newID("bt"))
	if mutate != nil {
		mutate(&spec)
	}
	h, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Delete(context.Background(), h); err != nil {
			t.Errorf("delete: %v", err)
		}
	})
	if h, err = b.Start(ctx, h); err != nil {
		t.Fatalf("start: %v", err)
	}
	c := agentclient.New(func(ctx context.Context) (netConn, error) { return b.DialAgent(ctx, h) })
	t.Cleanup(c.Close)
	return &Sandbox{B: b, H: h, Client: c}
}

// Exec runs argv and returns stdout, stderr and the result.
func (s *Sandbox) Exec(t *testing.T, user string, argv ...string) (string, string, agentclient.Result) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), scaled(60*time.Second))
	defer cancel()
	res, err := s.Client.Run(ctx, agentclient.Cmd{Args: argv, User: user, Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("exec %q: %v", argv, err)
	}
	return out.String(), errb.String(), res
}

// Sh runs a shell command as user and fails the test on a non-zero exit.
func (s *Sandbox) Sh(t *testing.T, user, script string) string {
	t.Helper()
	out, errb, res := s.Exec(t, user, "/bin/sh", "-c", script)
	if res.ExitCode != 0 {
		t.Fatalf("sh %q: exit %d (%s)\nstdout: %s\nstderr: %s", script, res.ExitCode, res.Status, out, errb)
	}
	return out
}

// suite lists the tests in the order Run runs them; isolation marks those
// that check isolation or kernel claims (namespaces, capabilities, probes,
// limits, the overlay writable layer), which RunNonIsolation leaves out.
var suite = []struct {
	name      string
	isolation bool
	fn        func(t *testing.T, f Factory, b backend.Backend)
}{
	{"Capabilities", false, testCapabilities},
	{"Lifecycle", false, testLifecycle},
	{"Exec", false, testExec},
	{"Stdin", false, testStdin},
	{"Signals", false, testSignals},
	{"Background", false, testBackground},
	{"PTY", false, testPTY},
	{"Files", false, testFiles},
	{"Overlay", true, testOverlay},
	{"CaptureUpper", true, testCaptureUpper},
	{"Volumes", false, testVolumes},
	{"Watch", false, testWatch},
	{"Isolation", true, testIsolation},
	{"Probes", true, testProbes},
	{"Limits", true, testLimits},
	{"Pause", false, testPause},
	{"ColdRestart", false, testColdRestart},
	{"Fork", false, testFork},
	{"Recover", false, testRecover},
	{"Teardown", false, testTeardown},
}

// Run runs the whole suite: RunNonIsolation's tests and RunIsolation's, in
// one order.
func Run(t *testing.T, f Factory) { run(t, f, true, true) }

// RunNonIsolation runs the tests of what a backend does rather than how it
// isolates: lifecycle, exec, stdin, signals, background processes, PTY,
// files, watch, pause, cold restart and fork where the backend declares them, restart
// recovery and teardown. A backend without isolation (the fake) passes it.
func RunNonIsolation(t *testing.T, f Factory) { run(t, f, true, false) }

// RunIsolation runs the isolation tests: the sandbox's view of the kernel,
// the escape and abuse probes, limits, and the overlay writable layer.
func RunIsolation(t *testing.T, f Factory) { run(t, f, false, true) }

func run(t *testing.T, f Factory, common, isolation bool) {
	b := f.New(t)
	for _, tc := range suite {
		if tc.isolation && isolation || !tc.isolation && common {
			t.Run(tc.name, func(t *testing.T) { tc.fn(t, f, b) })
		}
	}
}

func testLifecycle(t *testing.T, f Factory, b backend.Backend) {
	ctx := context.Background()
	spec := f.Spec(t, newID("life"))
	h, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	defer b.Delete(ctx, h)
	if st, err := b.Status(ctx, h); err != nil || st != backend.StateCreated {
		t.Fatalf("status after create = %q, %v; want created", st, err)
	}
	if _, err := b.Create(ctx, spec); err == nil {
		t.Fatal("second create with the same id succeeded")
	}
	if h, err = b.Start(ctx, h); err != nil {
		t.Fatalf("start: %v", err)
	}
	if _, err := b.Start(ctx, h); !errors.Is(err, backend.ErrAlreadyStart) {
		t.Fatalf("second start = %v, want ErrAlreadyStart", err)
	}
	if st, _ := b.Status(ctx, h); st != backend.StateRunning {
		t.Fatalf("status after start = %q", st)
	}
	c := agentclient.New(func(ctx context.Context) (netConn, error) { return b.DialAgent(ctx, h) })
	defer c.Close()
	if err := c.Health(ctx); err != nil {
		t.Fatalf("agent health: %v", err)
	}
	if _, err := b.Usage(ctx, h); err != nil {
		t.Fatalf("usage: %v", err)
	}
	if err := b.Stop(ctx, h, 2*time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := b.Wait(wctx, h); err != nil {
		t.Fatalf("wait: %v", err)
	}
	if st, _ := b.Status(ctx, h); st != backend.StateStopped {
		t.Fatalf("status after stop = %q", st)
	}
	if err := b.Delete(ctx, h); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := b.Delete(ctx, h); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := b.Status(ctx, h); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("status after delete = %v, want ErrNotFound", err)
	}
	bad := f.Spec(t, "Bad ID!")
	if _, err := b.Create(ctx, bad); !errors.Is(err, backend.ErrInvalidSpec) {
		t.Fatalf("create with bad id = %v, want ErrInvalidSpec", err)
	}
}

func testExec(t *testing.T, f Factory, b backend.Backend) {
	s := Start(t, f, b, func(sp *backend.Spec) { sp.Env = map[string]string{"WARDEN_TEST": "sandbox-env"} })
	out, errb, res := s.Exec(t, "", "/bin/sh", "-c", "echo out; echo err >&2; exit 3")
	if out != "out\n" || errb != "err\n" || res.ExitCode != 3 {
		t.Fatalf("got stdout %q stderr %q exit %d", out, errb, res.ExitCode)
	}
	home, tmp := s.dirs(t, f)
	if f.Unconfined {
		if got := s.Sh(t, "", "pwd; echo $HOME; echo $WARDEN_TEST"); got != home+"\n"+home+"\nsandbox-env\n" {
			t.Fatalf("default user context = %q", got)
		}
	} else {
		if got := s.Sh(t, "", "id -un; id -u; pwd; echo $HOME; echo $WARDEN_TEST"); got != "user\n1000\n/home/user\n/home/user\nsandbox-env\n" {
			t.Fatalf("default user context = %q", got)
		}
		if got := s.Sh(t, "root", "id -u; echo $HOME"); got != "0\n/root\n" {
			t.Fatalf("root context = %q", got)
		}
	}
	var out2 bytes.Buffer
	res, err := s.Client.Run(context.Background(), agentclient.Cmd{Args: []string{"sh", "-c", "pwd; echo $A"}, Dir: tmp, Env: map[string]string{"A": "b"}, Stdout: &out2})
	if err != nil || out2.String() != tmp+"\nb\n" || res.ExitCode != 0 {
		t.Fatalf("cwd/env: %q %v %+v", out2.String(), err, res)
	}
	if _, err := s.Client.Run(context.Background(), agentclient.Cmd{Args: []string{"true"}, Dir: "/does/not/exist"}); err == nil {
		t.Fatal("exec with missing cwd succeeded")
	}
	if res, err := s.Client.Run(context.Background(), agentclient.Cmd{Args: []string{"/no/such/binary"}}); err == nil && res.ExitCode == 0 && res.Error == "" {
		t.Fatal("missing binary reported success")
	}
	if !f.Unconfined { // the hostname and the template's tools
		if got := s.Sh(t, "", "hostname"); strings.TrimSpace(got) != s.H.ID {
			t.Fatalf("hostname = %q, want %q", got, s.H.ID)
		}
		for _, tool := range []string{"bash --version", "python3 -c 'print(6*7)'", "node -e 'console.log(6*7)'", "git --version", "ls /usr/bin/env"} {
			s.Sh(t, "", tool)
		}
	}
	// Concurrent execs over one connection.
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func(i int) {
			var o bytes.Buffer
			_, err := s.Client.Run(context.Background(), agentclient.Cmd{Args: []string{"sh", "-c", fmt.Sprintf("echo %d", i)}, Stdout: &o})
			if err == nil && o.String() != fmt.Sprintf("%d\n", i) {
				err = fmt.Errorf("got %q", o.String())
			}
			errs <- err
		}(i)
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent exec: %v", err)
		}
	}
}

func testStdin(t *testing.T, f Factory, b backend.Backend) {
	s := Start(t, f, b, nil)
	var out bytes.Buffer
	in := strings.NewReader(strings.Repeat("line\n", 1000))
	res, err := s.Client.Run(context.Background(), agentclient.Cmd{Args: []string{"wc", "-l"}, Stdin: in, Stdout: &out})
	if err != nil || strings.TrimSpace(out.String()) != "1000" || res.ExitCode != 0 {
		t.Fatalf("wc -l via stdin = %q, %v, %+v", out.String(), err, res)
	}
}

func testSignals(t *testing.T, f Factory, b backend.Backend) {
	s := Start(t, f, b, nil)
	ctx := context.Background()
	stream, err := s.Client.Start(ctx, agentclient.Cmd{Args: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("no start event: %v", stream.Err())
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	if err := s.Client.Signal(ctx, pid, syscall.SIGTERM); err != nil {
		t.Fatalf("signal: %v", err)
	}
	for stream.Receive() {
		if end := stream.Msg().GetEvent().GetEnd(); end != nil {
			if end.GetSignal() != int32(syscall.SIGTERM) && !strings.Contains(end.GetStatus(), "terminated") {
				t.Fatalf("end after SIGTERM = %+v", end)
			}
			return
		}
	}
	t.Fatalf("stream ended without end event: %v", stream.Err())
}

func testBackground(t *testing.T, f Factory, b backend.Backend) {
	s := Start(t, f, b, nil)
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := s.Client.Start(ctx, agentclient.Cmd{Args: []string{"sh", "-c", "echo first; sleep 1; echo second; sleep 300"}, Tag: "bg"})
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatalf("no start: %v", stream.Err())
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	cancel() // the client goes away; the process must survive
	stream.Close()
	time.Sleep(1500 * time.Millisecond)
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	cs, err := s.Client.Process.Connect(cctx, connect.NewRequest(connectReq(pid)))
	if err != nil {
		t.Fatalf("reconnect: %v", err)
	}
	defer cs.Close()
	var got strings.Builder
	for !strings.Contains(got.String(), "second") && cs.Receive() {
		if d := cs.Msg().GetEvent().GetData(); d != nil {
			got.Write(d.GetStdout())
		}
	}
	if got.String() != "first\nsecond\n" {
		t.Fatalf("replayed output = %q (err %v)", got.String(), cs.Err())
	}
	if err := s.Client.Signal(context.Background(), pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill background process: %v", err)
	}
}

func testPTY(t *testing.T, f Factory, b backend.Backend) {
	s := Start(t, f, b, nil)
	var out bytes.Buffer
	res, err := s.Client.Run(context.Background(), agentclient.Cmd{
		Args: []string{"sh", "-c", "tty; stty size"}, PTY: &agentclient.PTYSize{Cols: 101, Rows: 33}, Stdout: &out,
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("pty run: %v %+v", err, res)
	}
	if !strings.Contains(out.String(), "/dev/pts/") || !strings.Contains(out.String(), "33 101") {
		t.Fatalf("pty output = %q", out.String())
	}
	// Interactive: a shell reading commands from the terminal.
	out.Reset()
	res, err = s.Client.Run(context.Background(), agentclient.Cmd{
		Args: []string{"bash", "--norc", "-i"}, PTY: &agentclient.PTYSize{Cols: 80, Rows: 24},
		Stdin: strings.NewReader("echo $((40+2))\nexit 7\n"), Stdout: &out,
	})
	if err != nil || res.ExitCode != 7 || !strings.Contains(out.String(), "42") {
		t.Fatalf("interactive pty: %v %+v %q", err, res, out.String())
	}
}

func testFiles(t *testing.T, f Factory, b backend.Backend) {
	s := Start(t, f, b, nil)
	ctx := context.Background()
	c := s.Client
	home, _ := s.dirs(t, f)
	if err := c.WriteFile(ctx, home+"/dir/a.txt", "", 0o640, strings.NewReader("hello")); err != nil {
		t.Fatalf("write: %v", err)
	}
	r, err := c.ReadFile(ctx, "dir/a.txt", "")
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	got, _ := io.ReadAll(r)
	r.Close()
	if string(got) != "hello" {
		t.Fatalf("read back %q", got)
	}
	if f.Unconfined {
		if out := s.Sh(t, "", "stat -c '%a' "+home+"/dir/a.txt"); out != "640\n" {
			t.Fatalf("mode = %q", out)
		}
	} else if out := s.Sh(t, "", "stat -c '%U %a' /home/user/dir/a.txt"); out != "user 640\n" {
		t.Fatalf("owner/mode = %q", out)
	}
	st, err := c.FS.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: home + "/dir/a.txt"}))
	if err != nil || st.Msg.GetEntry().GetSize() != 5 || st.Msg.GetEntry().GetType() != fspb.FileType_FILE_TYPE_FILE {
		t.Fatalf("stat: %v %+v", err, st)
	}
	if _, err := c.FS.MakeDir(ctx, connect.NewRequest(&fspb.MakeDirRequest{Path: home + "/x/y/z"})); err != nil {
		t.Fatalf("mkdir: %v", err)
	}
	if _, err := c.FS.Move(ctx, connect.NewRequest(&fspb.MoveRequest{Source: home + "/dir/a.txt", Destination: home + "/x/b.txt"})); err != nil {
		t.Fatalf("move: %v", err)
	}
	ls, err := c.FS.ListDir(ctx, connect.NewRequest(&fspb.ListDirRequest{Path: home + "/x", Depth: 2}))
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	names := map[string]bool{}
	for _, e := range ls.Msg.GetEntries() {
		names[e.GetPath()] = true
	}
	for _, want := range []string{home + "/x/b.txt", home + "/x/y", home + "/x/y/z"} {
		if !names[want] {
			t.Fatalf("list depth 2 lacks %s: %v", want, names)
		}
	}
	if _, err := c.FS.Remove(ctx, connect.NewRequest(&fspb.RemoveRequest{Path: home + "/x"})); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if _, err := c.FS.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: home + "/x"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("stat removed = %v, want not_found", err)
	}
	// The default user cannot read root's files; root can.
	if !f.Unconfined {
		s.Sh(t, "root", "echo secret > /root/s; chmod 600 /root/s")
		if _, err := c.ReadFile(ctx, "/root/s", ""); err == nil {
			t.Fatal("user read /root/s")
		}
		if r, err := c.ReadFile(ctx, "/root/s", "root"); err != nil {
			t.Fatalf("root read: %v", err)
		} else {
			r.Close()
		}
	}
	// Tar round trip.
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	for name, body := range map[string]string{"p/one": "1", "p/q/two": "22"} {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(body))
	}
	tw.Close()
	if err := c.Upload(ctx, home+"/up", "", &tb); err != nil {
		t.Fatalf("upload: %v", err)
	}
	if out := s.Sh(t, "", "cat "+home+"/up/p/one "+home+"/up/p/q/two"); out != "122" {
		t.Fatalf("uploaded content = %q", out)
	}
	rc, err := c.Download(ctx, home+"/up", "")
	if err != nil {
		t.Fatalf("download: %v", err)
	}
	tr := tar.NewReader(rc)
	found := map[string]bool{}
	for {
		hd, err := tr.Next()
		if err != nil {
			break
		}
		found[strings.TrimPrefix(hd.Name, "./")] = true
	}
	rc.Close()
	if !found["p/one"] || !found["p/q/two"] {
		t.Fatalf("downloaded tar entries = %v", found)
	}
	// Tar slip is refused.
	tb.Reset()
	tw = tar.NewWriter(&tb)
	tw.WriteHeader(&tar.Header{Name: "../../etc/evil", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
	tw.Write([]byte("x"))
	tw.Close()
	if err := c.Upload(ctx, home+"/up", "root", &tb); err == nil {
		t.Fatal("tar slip upload succeeded")
	}
	if _, err := c.FS.Stat(ctx, connect.NewRequest(&fspb.StatRequest{Path: "/etc/evil"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("tar slip wrote /etc/evil: %v", err)
	}
}

func testWatch(t *testing.T, f Factory, b backend.Backend) {
	s := Start(t, f, b, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	home, _ := s.dirs(t, f)
	w := home + "/w"
	s.Sh(t, "", "mkdir -p "+w)
	stream, err := s.Client.FS.WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: w, Recursive: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("no start event: %v", stream.Err())
	}
	s.Sh(t, "", strings.ReplaceAll("echo x > W/f; mkdir W/sub; sleep 0.2; echo y > W/sub/g; rm W/f", "W", w))
	want := map[string]bool{"CREATE f": false, "REMOVE f": false, "CREATE sub/g": false}
	for stream.Receive() {
		ev := stream.Msg().GetFilesystem()
		if ev == nil {
			continue
		}
		k := strings.TrimPrefix(ev.GetType().String(), "EVENT_TYPE_") + " " + ev.GetName()
		if _, ok := want[k]; ok {
			want[k] = true
		}
		done := true
		for _, v := range want {
			done = done && v
		}
		if done {
			return
		}
	}
	t.Fatalf("watch events missing: %v (err %v)", want, stream.Err())
}

func testIsolation(t *testing.T, f Factory, b backend.Backend) {
	s := Start(t, f, b, nil)
	for _, user := range []string{"user", "root"} {
		st := s.Sh(t, user, "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status")
		for _, line := range strings.Split(strings.TrimSpace(st), "\n") {
			k, v, _ := strings.Cut(line, ":")
			v = strings.TrimSpace(v)
			switch k {
			case "NoNewPrivs":
				if v != "1" {
					t.Errorf("%s: NoNewPrivs = %s", user, v)
				}
			case "Seccomp":
				if v != "2" {
					t.Errorf("%s: Seccomp = %s", user, v)
				}
			default:
				if strings.Trim(v, "0") != "" {
					t.Errorf("%s: %s = %s, want 0", user, k, v)
				}
			}
		}
		// Mounting, new namespaces and raw sockets fail.
		_, _, res := s.Exec(t, user, "sh", "-c", "mount -t tmpfs none /mnt 2>/dev/null")
		if res.ExitCode == 0 {
			t.Errorf("%s: mount succeeded", user)
		}
		_, _, res = s.Exec(t, user, "unshare", "-U", "true")
		if res.ExitCode == 0 {
			t.Errorf("%s: unshare -U succeeded", user)
		}
		_, _, res = s.Exec(t, user, "python3", "-c", "import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)")
		if res.ExitCode == 0 {
			t.Errorf("%s: AF_PACKET socket succeeded", user)
		}
	}
	// Only the sandbox's processes are visible; PID 1 is the agent.
	ps := s.Sh(t, "root", "ls /proc | grep -E '^[0-9]+$' | wc -l")
	if n := strings.TrimSpace(ps); n == "0" || len(n) > 2 {
		t.Errorf("sandbox sees %s processes", n)
	}
	if got := s.Sh(t, "root", "cat /proc/1/cmdline | tr '\\0' ' '"); !strings.Contains(got, "warden-agent") {
		t.Errorf("pid 1 is %q", got)
	}
	if _, _, res := s.Exec(t, "root", "cat", "/proc/1/environ"); res.ExitCode == 0 {
		t.Error("sandbox root read the agent's /proc/1/environ")
	}
	// Loopback only.
	if got := s.Sh(t, "", "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"); strings.TrimSpace(got) != "lo" {
		t.Errorf("network devices = %q, want only lo", got)
	}
	// The user cannot write the template; root's writes stay in its own layer.
	if _, _, res := s.Exec(t, "user", "sh", "-c", "echo x > /usr/bin/warden-probe"); res.ExitCode == 0 {
		t.Error("user wrote /usr/bin")
	}
	// /sys is absent and /proc/sys read-only.
	if _, _, res := s.Exec(t, "root", "sh", "-c", "echo 1 > /proc/sys/kernel/core_pattern"); res.ExitCode == 0 {
		t.Error("root wrote /proc/sys/kernel/core_pattern")
	}
	if got := s.Sh(t, "", "ls /sys | wc -l"); strings.TrimSpace(got) != "0" {
		t.Errorf("/sys has %s entries", got)
	}
	// Devices: only the minimal set.
	got := s.Sh(t, "", "ls /dev | sort | tr '\\n' ' '")
	if got != "fd full null ptmx pts random shm stderr stdin stdout tty urandom zero " {
		t.Errorf("/dev = %q", got)
	}
}

func testLimits(t *testing.T, f Factory, b backend.Backend) {
	s := Start(t, f, b, func(sp *backend.Spec) {
		sp.Limits = backend.Limits{MemoryBytes: 128 << 20, Pids: 64, DiskBytes: 64 << 20, CPUMillis: 500}
	})
	ctx := context.Background()
	// Pids: more than the limit cannot exist at once.
	out := s.Sh(t, "", `python3 -c '
import subprocess
ps, failed = [], 0
for i in range(100):
    try:
        ps.append(subprocess.Popen(["sleep", "30"]))
    except OSError:
        failed += 1
for p in ps:
    p.kill(); p.wait()
print(len(ps), failed)
'`)
	var started, failed int
	fmt.Sscan(out, &started, &failed)
	if started >= 64 || failed == 0 {
		t.Errorf("pids limit 64: %d of 100 processes started, %d refused", started, failed)
	}
	// Memory: an allocation past the limit is killed.
	_, _, res := s.Exec(t, "", "python3", "-c", "b = bytearray(400*1024*1024); print(len(b))")
	if res.ExitCode == 0 {
		t.Errorf("allocating 400 MiB under a 128 MiB limit succeeded")
	}
	u, err := b.Usage(ctx, s.H)
	if err != nil {
		t.Fatal(err)
	}
	if u.OOMEvents < 1 {
		t.Errorf("usage reports %d OOM events after an OOM kill", u.OOMEvents)
	}
	// Disk: the writable layer stops at its limit.
	_, errb, res := s.Exec(t, "", "sh", "-c", "dd if=/dev/zero of=/home/user/fill bs=1M count=200")
	if res.ExitCode == 0 || !strings.Contains(errb, "No space left") {
		t.Errorf("disk fill past 64 MiB: exit %d, %q", res.ExitCode, errb)
	}
	if u, _ := b.Usage(ctx, s.H); u.DiskBytes >= 0 && u.DiskBytes > 70<<20 {
		t.Errorf("disk usage %d exceeds the limit", u.DiskBytes)
	}
	s.Sh(t, "", "rm -f /home/user/fill")
	// The sandbox still works after hitting every limit.
	s.Sh(t, "", "echo alive")
}

// counterScript keeps a count in a shell variable (the process's memory)
// and writes it out every 50ms with the shell's pid, to tmp/count.
func counterScript(tmp string) string {
	return strings.ReplaceAll(`i=0; while :; do i=$((i+1)); echo "$$ $i" > TMP/count.new; mv TMP/count.new TMP/count; sleep 0.05; done`, "TMP", tmp)
}

// readCounter returns the counter process's pid and count.
func readCounter(t *testing.T, s *Sandbox) (pid, n int) {
	t.Helper()
	out := strings.TrimSpace(s.Sh(t, "", "cat "+s.tmp+"/count"))
	if _, err := fmt.Sscanf(out, "%d %d", &pid, &n); err != nil {
		t.Fatalf("counter: %q: %v", out, err)
	}
	return pid, n
}

// startCounter starts the counter in the background and waits for its
// first count.
func startCounter(t *testing.T, f Factory, s *Sandbox) {
	t.Helper()
	_, tmp := s.dirs(t, f)
	s.Sh(t, "", "(sh -c '"+counterScript(tmp)+"' >/dev/null 2>&1 &); for i in $(seq 100); do [ -s "+tmp+"/count ] && exit 0; sleep 0.05; done; exit 1")
}

// checkCounting checks the counter process is the same one and counts on
// from at least n.
func checkCounting(t *testing.T, s *Sandbox, pid, n int, when string) {
	t.Helper()
	p1, n1 := readCounter(t, s)
	// Growing is what counts, not how fast: on a loaded host a restored
	// sandbox's loop can miss a short window, so wait up to 10 s for it.
	var p2, n2 int
	for deadline := time.Now().Add(10 * time.Second); ; {
		time.Sleep(300 * time.Millisecond)
		if p2, n2 = readCounter(t, s); n2 > n1 || p2 != pid || time.Now().After(deadline) {
			break
		}
	}
	if p1 != pid || p2 != pid {
		t.Fatalf("%s: the counter is process %d then %d, want %d (it was restarted, not resumed)", when, p1, p2, pid)
	}
	if n1 < n || n2 <= n1 {
		t.Fatalf("%s: count %d then %d; want at least %d and growing (the process lost its memory or stopped)", when, n1, n2, n)
	}
}

func testPause(t *testing.T, f Factory, b backend.Backend) {
	p, ok := b.(backend.Pauser)
	if !b.Capabilities().Pause || !ok {
		t.Skipf("backend %s declares no pause capability", b.ID())
	}
	s := Start(t, f, b, nil)
	ctx := context.Background()
	home, tmp := s.dirs(t, f)
	shm := "/dev/shm"
	if f.Unconfined {
		shm = tmp
	}
	s.Sh(t, "", strings.NewReplacer("HOME", home, "SHM", shm).Replace("echo kept > HOME/state && head -c 48M /dev/urandom > SHM/blob && md5sum SHM/blob > HOME/blob.md5"))
	startCounter(t, f, s)
	pid, n := readCounter(t, s)
	before, err := b.Usage(ctx, s.H)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Pause(ctx, s.H); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if st, _ := b.Status(ctx, s.H); st != backend.StatePaused {
		t.Fatalf("status after pause = %q", st)
	}
	time.Sleep(300 * time.Millisecond)
	during, err := b.Usage(ctx, s.H)
	if err != nil {
		t.Fatalf("usage while paused: %v", err)
	}
	t.Logf("memory before pause %d MiB, while paused %d MiB; CPU while paused measured below", before.MemoryBytes>>20, during.MemoryBytes>>20)
	if b.Capabilities().MemorySnapshot {
		// Written to disk and released: the 48 MiB in /dev/shm and all else.
		if before.MemoryBytes < 48<<20 || during.MemoryBytes > 16<<20 {
			t.Errorf("memory %d MiB before pause, %d MiB while paused: a memory snapshot must release it", before.MemoryBytes>>20, during.MemoryBytes>>20)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if later, err := b.Usage(ctx, s.H); err == nil && later.CPUNanos-during.CPUNanos > int64(20*time.Millisecond) {
		t.Errorf("a paused sandbox used %s of CPU in 300ms", time.Duration(later.CPUNanos-during.CPUNanos))
	}
	// Pausing again may fail or do nothing; it must not unpause.
	p.Pause(ctx, s.H)
	if st, _ := b.Status(ctx, s.H); st != backend.StatePaused {
		t.Fatalf("status after a second pause = %q", st)
	}
	// A restarted daemon finds it paused and resumes it.
	b2 := f.New(t)
	if err := b2.Recover(ctx, s.H); err != nil {
		t.Fatalf("recover a paused sandbox: %v", err)
	}
	if st, _ := b2.Status(ctx, s.H); st != backend.StatePaused {
		t.Fatalf("status of a paused sandbox after recovery = %q", st)
	}
	if err := b2.(backend.Pauser).Resume(ctx, s.H); err != nil {
		t.Fatalf("resume after recovery: %v", err)
	}
	if st, _ := b2.Status(ctx, s.H); st != backend.StateRunning {
		t.Fatalf("status after resume = %q", st)
	}
	c := agentclient.New(func(ctx context.Context) (netConn, error) { return b2.DialAgent(ctx, s.H) })
	defer c.Close()
	s2 := &Sandbox{B: b2, H: s.H, Client: c, home: home, tmp: tmp}
	checkCounting(t, s2, pid, n, "after pause, daemon restart and resume")
	if got := s2.Sh(t, "", "cat "+home+"/state && md5sum -c --quiet "+home+"/blob.md5 && echo blob-ok"); got != "kept\nblob-ok\n" {
		t.Fatalf("files after resume: %q", got)
	}
	// Pause and resume again, on the same backend.
	if err := b2.(backend.Pauser).Pause(ctx, s.H); err != nil {
		t.Fatalf("second pause: %v", err)
	}
	if err := b2.(backend.Pauser).Resume(ctx, s.H); err != nil {
		t.Fatalf("second resume: %v", err)
	}
	checkCounting(t, s2, pid, n, "after a second pause and resume")
	if err := b2.Delete(ctx, s.H); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if left := f.Leftovers(t, s.H.ID); len(left) > 0 {
		t.Fatalf("leftovers after delete: %v", left)
	}
}

// testFork forks a running sandbox with state twice: each fork has the
// state (files, a running process and its memory), its own writable layer,
// and its own random numbers; the source keeps running.
func testFork(t *testing.T, f Factory, b backend.Backend) {
	sn, ok := b.(backend.Snapshotter)
	if !b.Capabilities().Fork || !ok {
		t.Skipf("backend %s declares no fork capability", b.ID())
	}
	ctx := context.Background()
	src := Start(t, f, b, nil)
	src.Sh(t, "", "echo parent > /home/user/state")
	startCounter(t, f, src)
	pid, n := readCounter(t, src)
	ref, err := sn.Snapshot(ctx, src.H)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	defer sn.DeleteSnapshot(ctx, ref)
	checkCounting(t, src, pid, n, "the source after the snapshot")
	var forks []*Sandbox
	for i := 0; i < 2; i++ {
		spec := f.Spec(t, newID("fork"))
		h, err := b.Create(ctx, spec)
		if err != nil {
			t.Fatalf("create fork %d: %v", i, err)
		}
		if h, err = sn.StartFrom(ctx, h, ref); err != nil {
			b.Delete(ctx, h)
			t.Fatalf("start fork %d from the snapshot: %v", i, err)
		}
		t.Cleanup(func() {
			if err := b.Delete(context.Background(), h); err != nil {
				t.Errorf("delete fork: %v", err)
			}
			if left := f.Leftovers(t, h.ID); len(left) > 0 {
				t.Errorf("leftovers after deleting a fork: %v", left)
			}
		})
		c := agentclient.New(func(ctx context.Context) (netConn, error) { return b.DialAgent(ctx, h) })
		t.Cleanup(c.Close)
		forks = append(forks, &Sandbox{B: b, H: h, Client: c, home: src.home, tmp: src.tmp})
	}
	var rnd []string
	for i, fk := range forks {
		checkCounting(t, fk, pid, n, fmt.Sprintf("fork %d", i))
		if got := fk.Sh(t, "", "cat /home/user/state"); got != "parent\n" {
			t.Fatalf("fork %d: state %q", i, got)
		}
		fk.Sh(t, "", fmt.Sprintf("echo fork%d > /home/user/state", i))
		rnd = append(rnd, fk.Sh(t, "", "head -c 16 /dev/urandom | od -An -tx1"))
	}
	for i, fk := range forks {
		if got := fk.Sh(t, "", "cat /home/user/state"); got != fmt.Sprintf("fork%d\n", i) {
			t.Fatalf("fork %d sees %q: forks share a writable layer", i, got)
		}
	}
	if got := src.Sh(t, "", "cat /home/user/state"); got != "parent\n" {
		t.Fatalf("the source sees %q after its forks wrote", got)
	}
	if rnd[0] == rnd[1] {
		t.Fatalf("two forks read the same random bytes: %s", rnd[0])
	}
}

func testRecover(t *testing.T, f Factory, b backend.Backend) {
	s := Start(t, f, b, nil)
	home, tmp := s.dirs(t, f)
	s.Sh(t, "", "echo kept > "+home+"/state")
	h := s.H // the handle Start returned: what a daemon stores
	// A second backend instance stands in for a restarted daemon.
	b2 := f.New(t)
	if err := b2.Recover(context.Background(), h); err != nil {
		t.Fatalf("recover: %v", err)
	}
	c := agentclient.New(func(ctx context.Context) (netConn, error) { return b2.DialAgent(ctx, h) })
	defer c.Close()
	s2 := &Sandbox{B: b2, H: h, Client: c, home: home, tmp: tmp}
	if got := s2.Sh(t, "", "cat "+home+"/state"); got != "kept\n" {
		t.Fatalf("state after recover = %q", got)
	}
	// A handle whose sandbox is gone is reported lost, not re-attached.
	b3 := f.New(t)
	if err := b2.Delete(context.Background(), h); err != nil {
		t.Fatalf("delete via recovered backend: %v", err)
	}
	if err := b3.Recover(context.Background(), h); !errors.Is(err, backend.ErrLost) {
		t.Fatalf("recover of a deleted sandbox = %v, want ErrLost", err)
	}
	if left := f.Leftovers(t, h.ID); len(left) > 0 {
		t.Fatalf("leftovers after lost recovery: %v", left)
	}
}

func testTeardown(t *testing.T, f Factory, b backend.Backend) {
	ctx := context.Background()
	spec := f.Spec(t, newID("down"))
	h, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if h, err = b.Start(ctx, h); err != nil {
		b.Delete(ctx, h)
		t.Fatal(err)
	}
	c := agentclient.New(func(ctx context.Context) (netConn, error) { return b.DialAgent(ctx, h) })
	s := &Sandbox{B: b, H: h, Client: c}
	// Leave things running: background processes, a daemonised orphan, files, a PTY.
	_, tmp := s.dirs(t, f)
	shm := "/dev/shm"
	if f.Unconfined {
		shm = tmp
	}
	s.Sh(t, "", "sleep 1000 & (setsid sleep 1000 &) ; echo x > "+tmp+"/f; echo y > "+shm+"/g")
	stream, err := c.Start(ctx, agentclient.Cmd{Args: []string{"sleep", "1000"}, PTY: &agentclient.PTYSize{Cols: 80, Rows: 24}})
	if err == nil {
		stream.Receive()
	}
	c.Close()
	if err := b.Delete(ctx, h); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if left := f.Leftovers(t, h.ID); len(left) > 0 {
		t.Fatalf("leftovers after delete: %v", left)
	}
	if f.Unconfined {
		return // kill -1 from inside would reach the host's processes
	}
	// A sandbox that kills everything from inside is noticed.
	s2 := Start(t, f, b, nil)
	s2.Exec(t, "root", "kill", "-9", "-1")
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if st, _ := b.Status(ctx, s2.H); st != backend.StateRunning {
		// kill -1 from inside must not reach PID 1; the sandbox keeps running.
		t.Fatalf("after kill -9 -1 inside, status = %q", st)
	}
	_ = wctx
	s2.Sh(t, "", "echo still-serving")
}

func connectReq(pid uint32) *processReq { return newConnectRequest(pid) }
