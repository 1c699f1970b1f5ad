package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestPauseCrash kills the daemon with SIGKILL (WARDEN_TEST_CRASH_AT, see
// internal/crashpoint) at each step of a gvisor pause, and of the image a
// fork takes, and restarts it. The sandbox must come back consistent:
// running with exec working (the pause undone) or paused with resume
// working (the pause finished), its process and files intact, no partial
// image left, a normal pause and resume working afterwards, and nothing
// left on the host once it is killed. When its kernel died too while the
// daemon was down, it is lost with a clear reason and cleaned up.
func TestPauseCrash(t *testing.T) {
	if _, err := os.Stat("/usr/local/bin/runsc"); err != nil {
		t.Fatalf("runsc is not installed (scripts/install-deps.sh builds it): %v", err)
	}
	for _, tc := range []struct {
		point  string
		native bool   // a native sandbox (the cgroup freezer)
		fork   bool   // crash in a fork's snapshot instead of a pause
		want   string // the sandbox's state after the restart
		// killSentry: the sandbox's kernel dies while the daemon is down.
		killSentry bool
	}{
		{point: "pause-after-suspend", want: "running"},
		{point: "pause-mid-checkpoint", want: "running"},
		{point: "pause-before-rename", want: "running"},
		{point: "pause-before-record", want: "paused"},
		{point: "pause-before-store", want: "paused"},
		{point: "pause-mid-checkpoint", fork: true, want: "running"},
		{point: "pause-mid-checkpoint", killSentry: true, want: "lost"},
		{point: "pause-before-store", native: true, want: "paused"},
	} {
		name := tc.point
		if tc.native {
			name += "/native"
		}
		if tc.fork {
			name += "/fork"
		}
		if tc.killSentry {
			name += "/kernel-died"
		}
		t.Run(name, func(t *testing.T) { testPauseCrash(t, tc.point, tc.native, tc.fork, tc.killSentry, tc.want) })
	}
}

func testPauseCrash(t *testing.T, point string, native, fork, killSentry bool, want string) {
	state, run := newDirs(t)
	t.Cleanup(func() { unmountUnder(filepath.Join(run, "gvisor")) })
	d := startDaemonEnv(t, state, run, []string{"WARDEN_TEST_CRASH_AT=" + point})
	c := d.client(t, d.adminKey)
	ctx := ctxT(t)
	isolation := "gvisor"
	if native {
		isolation = "native"
	}
	sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{Isolation: isolation, TimeoutSeconds: 600, MemoryMB: 512})
	if err != nil {
		t.Fatal(err)
	}
	sh := func(c *warden.Client, script string) string {
		t.Helper()
		var out, errb bytes.Buffer
		res, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"sh", "-c", script}}, warden.ExecIO{Stdout: &out, Stderr: &errb})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%q: %v exit %d: %s", script, err, res.ExitCode, errb.String())
		}
		return out.String()
	}
	sh(c, "echo kept > /home/user/state")
	// A counter holding 96 MiB of written memory: the image takes a while
	// to write, and the same process must count on afterwards.
	counter, err := c.StartProcess(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"python3", "-c",
		"import itertools, os, time\nbuf = bytes(range(256)) * (96 << 12)\nfor i in itertools.count():\n    open('/tmp/c.tmp', 'w').write('%d %d' % (os.getpid(), i)); os.replace('/tmp/c.tmp', '/tmp/c'); time.sleep(0.02)\n"}})
	if err != nil {
		t.Fatal(err)
	}
	counter.Close()
	readCounter := func(c *warden.Client) (pid, n int) {
		t.Helper()
		fmt.Sscan(sh(c, "cat /tmp/c 2>/dev/null || echo 0 0"), &pid, &n)
		return pid, n
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, n := readCounter(c); n > 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the counter did not start")
		}
		time.Sleep(100 * time.Millisecond)
	}
	pid0, n0 := readCounter(c)

	// The daemon dies at the point.
	if fork {
		_, err = c.ForkSandbox(ctx, sb.ID, warden.ForkRequest{Count: 1})
	} else {
		_, err = c.PauseSandbox(ctx, sb.ID)
	}
	if err == nil {
		t.Fatalf("the call succeeded: the daemon did not crash at %s\n%s", point, d.log)
	}
	waitCrash(t, d)
	if killSentry {
		// The sandbox's kernel dies too while the daemon is down.
		if procs := gvisorProcs(sb.ID); len(procs) == 0 {
			t.Fatal("no process of the sandbox to kill")
		}
		for _, p := range gvisorProcs(sb.ID) {
			syscall.Kill(p, syscall.SIGKILL)
		}
		time.Sleep(300 * time.Millisecond)
	}

	d = startDaemon(t, state, run)
	c = d.client(t, d.adminKey)
	got, err := c.GetSandbox(ctx, sb.ID)
	if err != nil || string(got.State) != want {
		t.Fatalf("after the restart the sandbox is %+v, %v; want %s\n%s", got, err, want, d.log)
	}
	cpDir := filepath.Join(state, "gvisor-checkpoints")
	if m, _ := filepath.Glob(filepath.Join(cpDir, sb.ID+".new")); len(m) > 0 {
		t.Errorf("a partial checkpoint is left: %v", m)
	}
	if m, _ := filepath.Glob(filepath.Join(run, "gvisor", ".snapshots", "*")); len(m) > 0 {
		t.Errorf("snapshots left: %v", m)
	}
	if want == "lost" {
		if !strings.Contains(got.EndReason, "paused") {
			t.Errorf("end reason %q does not say the pause was interrupted", got.EndReason)
		}
		checkGVisorGone(t, run, cpDir, sb.ID)
		return
	}
	if want == "paused" {
		if _, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"true"}}, warden.ExecIO{}); !warden.IsConflict(err) {
			t.Fatalf("exec in the paused sandbox: %v, want 409", err)
		}
		if _, err := c.ResumeSandbox(ctx, sb.ID); err != nil {
			t.Fatalf("resume after the restart: %v\n%s", err, d.log)
		}
	}
	if got, err := c.GetSandbox(ctx, sb.ID); err != nil || got.State != "running" {
		t.Fatalf("sandbox %+v, %v; want running", got, err)
	}
	if m, _ := filepath.Glob(filepath.Join(cpDir, sb.ID+"*")); len(m) > 0 {
		t.Errorf("checkpoint files left of a running sandbox: %v", m)
	}
	for _, p := range []string{filepath.Join(run, "gvisor", sb.ID, "pausing"), filepath.Join(run, "gvisor", sb.ID, "control", "suspended")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s left", p)
		}
	}
	// Exec works, with the files and the same process counting on.
	if got := sh(c, "cat /home/user/state"); got != "kept\n" {
		t.Fatalf("file after recovery: %q", got)
	}
	pid1, n1 := readCounter(c)
	deadline = time.Now().Add(10 * time.Second)
	for {
		pid2, n2 := readCounter(c)
		if pid1 != pid0 || pid2 != pid0 || n1 < n0 {
			t.Fatalf("counter: pid %d -> %d -> %d, count %d -> %d -> %d", pid0, pid1, pid2, n0, n1, n2)
		}
		if n2 > n1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the counter stopped at %d after recovery", n2)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A normal pause and resume work as before.
	if _, err := c.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("pause after recovery: %v\n%s", err, d.log)
	}
	if _, err := c.ResumeSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("resume after recovery: %v\n%s", err, d.log)
	}
	if got := sh(c, "cat /home/user/state"); got != "kept\n" {
		t.Fatalf("file after a pause: %q", got)
	}
	if err := c.KillSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if native {
		if left := hostLeftovers(run, sb.ID); len(left) > 0 {
			t.Errorf("left of %s: %v", sb.ID, left)
		}
		return
	}
	checkGVisorGone(t, run, cpDir, sb.ID)
}

// waitCrash waits for the daemon to have died of SIGKILL.
func waitCrash(t *testing.T, d *daemon) {
	t.Helper()
	done := make(chan struct{})
	go func() { d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the daemon did not die\n%s", d.log)
	}
	ws, ok := d.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the daemon ended with %v, not SIGKILL\n%s", d.cmd.ProcessState, d.log)
	}
	d.cmd = nil
}

// gvisorProcs lists the host processes in gvisor sandbox id's cgroup (its
// sentry, gofer and stubs).
func gvisorProcs(id string) []int {
	var out []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), "/gv-"+id+"\n") {
			var pid int
			fmt.Sscan(filepath.Base(filepath.Dir(p)), &pid)
			out = append(out, pid)
		}
	}
	return out
}

// checkGVisorGone fails t if anything of gvisor sandbox id is left on the
// host: its run directory, checkpoint, processes or cgroups.
func checkGVisorGone(t *testing.T, run, cpDir, id string) {
	t.Helper()
	var left []string
	if _, err := os.Stat(filepath.Join(run, "gvisor", id)); err == nil {
		left = append(left, "run directory")
	}
	m, _ := filepath.Glob(filepath.Join(cpDir, id+"*"))
	left = append(left, m...)
	for _, p := range gvisorProcs(id) {
		left = append(left, fmt.Sprint("process ", p))
	}
	left = append(left, sandboxProcs(id)...)
	m, _ = filepath.Glob("/sys/fs/cgroup/*/warden/gv-" + id)
	left = append(left, m...)
	if len(left) > 0 {
		t.Errorf("left of %s: %v", id, left)
	}
}
