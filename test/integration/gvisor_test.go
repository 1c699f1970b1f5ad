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

	"golang.org/x/sys/unix"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// TestGVisor drives gvisor sandboxes through the daemon: a sandbox asked for
// with isolation gvisor runs under gVisor's kernel; pause checkpoints it to
// disk and releases its memory on the host; a daemon restart between pause
// and resume loses nothing (a Python counter counts on in the same process,
// files kept, same id); fork makes independent sandboxes with that state and
// their own random numbers; a filesystem snapshot of the running sandbox
// leaves it running and boots a native sandbox on its files; nothing is left
// on the host afterwards.
func TestGVisor(t *testing.T) {
	if _, err := os.Stat("/usr/local/bin/runsc"); err != nil {
		t.Fatalf("runsc is not installed (scripts/install-deps.sh builds it): %v", err)
	}
	state, run := newDirs(t)
	t.Cleanup(func() { unmountUnder(filepath.Join(run, "gvisor")) })
	d := startDaemon(t, state, run)
	c := d.client(t, d.adminKey)
	ctx := ctxT(t)

	sb := create(t, c, warden.CreateSandboxRequest{Isolation: "gvisor", TimeoutSeconds: 600})
	if sb.Backend != "gvisor" {
		t.Fatalf("backend = %q, want gvisor", sb.Backend)
	}
	sh := func(id, script string) string {
		t.Helper()
		var out, errb bytes.Buffer
		res, err := c.Exec(ctx, id, warden.ExecRequest{Cmd: []string{"sh", "-c", script}}, warden.ExecIO{Stdout: &out, Stderr: &errb})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: %q: %v exit %d: %s", id, script, err, res.ExitCode, errb.String())
		}
		return out.String()
	}
	// gVisor's kernel reports its own release, never the host's.
	var uts unix.Utsname
	unix.Uname(&uts)
	if out := strings.TrimSpace(sh(sb.ID, "uname -r")); out == unix.ByteSliceToString(uts.Release[:]) {
		t.Fatalf("uname -r in a gvisor sandbox is the host's kernel, %q", out)
	}
	sh(sb.ID, "echo kept > /home/user/state")
	counter, err := c.StartProcess(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"python3", "-c",
		"import itertools, os, time\nbuf = bytearray(64 << 20)\nfor i in itertools.count():\n    open('/tmp/c.tmp', 'w').write('%d %d' % (os.getpid(), i)); os.replace('/tmp/c.tmp', '/tmp/c'); time.sleep(0.02)\n"}})
	if err != nil {
		t.Fatal(err)
	}
	counter.Close()
	readCounter := func(id string) (pid, n int) {
		t.Helper()
		fmt.Sscan(sh(id, "cat /tmp/c 2>/dev/null || echo 0 0"), &pid, &n)
		return pid, n
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, n := readCounter(sb.ID); n > 5 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	pid0, n0 := readCounter(sb.ID)
	before, err := c.Usage(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if _, err := c.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	t.Logf("pause took %s", time.Since(t0))
	during, err := c.Usage(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("host memory of the sandbox: %d MiB running, %d MiB paused", before.MemoryBytes>>20, during.MemoryBytes>>20)
	if before.MemoryBytes < 64<<20 || during.MemoryBytes > 8<<20 {
		t.Fatalf("host memory %d MiB running, %d MiB paused: pause must release it", before.MemoryBytes>>20, during.MemoryBytes>>20)
	}
	if procs := sandboxProcs(sb.ID); len(procs) > 0 {
		t.Fatalf("processes of a paused gvisor sandbox are still on the host: %v", procs)
	}
	if _, err := c.Exec(ctx, sb.ID, warden.ExecRequest{Cmd: []string{"true"}}, warden.ExecIO{}); !warden.IsConflict(err) {
		t.Fatalf("exec while paused: %v, want 409", err)
	}

	// A daemon restart between pause and resume.
	d.stop(syscall.SIGTERM)
	d = startDaemon(t, state, run)
	c = d.client(t, d.adminKey)
	if got, err := c.GetSandbox(ctx, sb.ID); err != nil || got.State != "paused" {
		t.Fatalf("after a restart the paused sandbox is %+v, %v\n%s", got, err, d.log)
	}
	t0 = time.Now()
	if _, err := c.ResumeSandbox(ctx, sb.ID); err != nil {
		t.Fatalf("resume after restart: %v\n%s", err, d.log)
	}
	t.Logf("resume took %s", time.Since(t0))
	pid1, n1 := readCounter(sb.ID)
	time.Sleep(300 * time.Millisecond)
	pid2, n2 := readCounter(sb.ID)
	if pid1 != pid0 || pid2 != pid0 || n1 < n0 || n2 <= n1 {
		t.Fatalf("counter across pause, restart and resume: pid %d -> %d -> %d, count %d -> %d -> %d", pid0, pid1, pid2, n0, n1, n2)
	}
	if got := sh(sb.ID, "cat /home/user/state"); got != "kept\n" {
		t.Fatalf("file after resume: %q", got)
	}
	// A snapshot with memory (kept under the state directory); a sandbox
	// from it runs on later in this test. Taken after the pause check
	// above, whose bound on a paused sandbox's memory it would disturb.
	if sn, err := c.CreateSnapshotWithMemory(ctx, sb.ID, "gmem"); err != nil || !sn.Memory || sn.MemoryBackend != "gvisor" {
		t.Fatalf("snapshot with memory: %+v %v\n%s", sn, err, d.log)
	}

	// Fork, through the CLI: two sandboxes with the state, each its own.
	out, errb, code := d.cli(t, "", "sandbox", "fork", "-n", "2", "--meta", "try=x", sb.ID)
	if code != 0 {
		t.Fatalf("warden sandbox fork: %d %s %s\n%s", code, out, errb, d.log)
	}
	forks := strings.Fields(out)
	if len(forks) != 2 {
		t.Fatalf("fork printed %q", out)
	}
	var rnd []string
	for i, id := range forks {
		got, err := c.GetSandbox(ctx, id)
		if err != nil || got.State != "running" || got.Backend != "gvisor" || got.Metadata["forked_from"] != sb.ID || got.Metadata["try"] != "x" {
			t.Fatalf("fork %s: %+v %v", id, got, err)
		}
		p1, m1 := readCounter(id)
		time.Sleep(200 * time.Millisecond)
		p2, m2 := readCounter(id)
		if p1 != pid0 || p2 != pid0 || m1 < n1 || m2 <= m1 {
			t.Fatalf("fork %s: counter pid %d -> %d, count %d -> %d; want process %d counting on from %d", id, p1, p2, m1, m2, pid0, n1)
		}
		if got := sh(id, "cat /home/user/state"); got != "kept\n" {
			t.Fatalf("fork %s: file %q", id, got)
		}
		sh(id, fmt.Sprintf("echo fork%d > /home/user/state", i))
		rnd = append(rnd, sh(id, "head -c 16 /dev/urandom | od -An -tx1; python3 -c 'import os; print(os.urandom(16).hex())'"))
	}
	if rnd[0] == rnd[1] {
		t.Fatalf("two forks read the same random bytes: %s", rnd[0])
	}
	for i, id := range forks {
		if got := sh(id, "cat /home/user/state"); got != fmt.Sprintf("fork%d\n", i) {
			t.Fatalf("fork %s sees %q: forks share a writable layer", id, got)
		}
	}
	if got := sh(sb.ID, "cat /home/user/state"); got != "kept\n" {
		t.Fatalf("the source sees %q after its forks wrote", got)
	}
	// A filesystem snapshot of the running source: no pause (a checkpoint)
	// for it, the source counts on in the same process; a native sandbox
	// boots on its files.
	sh(sb.ID, "sudo sh -c 'rm /etc/warden-base-packages; rm -rf /etc/alternatives; mkdir /etc/alternatives; echo new > /etc/alternatives/only'")
	if _, err := c.CreateSnapshot(ctx, sb.ID, "gsnap"); err != nil {
		t.Fatalf("snapshot of a gvisor sandbox: %v\n%s", err, d.log)
	}
	if p, m := readCounter(sb.ID); p != pid0 || m <= n1 {
		t.Fatalf("source after its snapshot: counter pid %d count %d; want process %d counting on from %d", p, m, pid0, n1)
	}
	// Native sandboxes cannot fork: a clear 409.
	nat := create(t, c, warden.CreateSandboxRequest{Snapshot: "gsnap"})
	// A removed template file stays removed (a whiteout), a directory made
	// again holds only its new files (opaque), /tmp is not captured.
	if got := sh(nat.ID, "cat /home/user/state; ls /etc/alternatives; test -e /etc/warden-base-packages || echo removed; test -e /tmp/c || echo no-tmp"); got != "kept\nonly\nremoved\nno-tmp\n" {
		t.Fatalf("native sandbox from the gvisor snapshot: %q", got)
	}
	if _, err := c.ForkSandbox(ctx, nat.ID, warden.ForkRequest{}); !warden.IsConflict(err) {
		t.Fatalf("fork of a native sandbox: %v, want 409", err)
	}
	// Native sandboxes keep no memory: 422 naming the capability, nothing made.
	if _, err := c.CreateSnapshotWithMemory(ctx, nat.ID, "nmem"); !warden.IsValidationFailed(err) || !strings.Contains(err.Error(), "fork") {
		t.Fatalf("snapshot with memory of a native sandbox: %v, want 422 naming fork", err)
	}
	if _, err := c.GetSnapshot(ctx, "nmem"); !warden.IsNotFound(err) {
		t.Fatalf("refused memory snapshot left a snapshot: %v", err)
	}
	// A gvisor sandbox from the memory snapshot (taken after the resume)
	// runs the source's counter on, in the same process, from where it was
	// then; its in-memory /tmp is the source's.
	if _, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{Snapshot: "gmem", Isolation: "gvisor", Env: map[string]string{"A": "b"}}); !warden.IsValidationFailed(err) {
		t.Fatalf("restore from a memory snapshot with env: %v, want 422 (the source's settings apply)", err)
	}
	mem := create(t, c, warden.CreateSandboxRequest{Snapshot: "gmem", Isolation: "gvisor", Metadata: map[string]string{"try": "m"}})
	if mem.Backend != "gvisor" || mem.Metadata["try"] != "m" || mem.Metadata["snapshot"] == "" {
		t.Fatalf("sandbox from a memory snapshot: %+v", mem)
	}
	mp1, mn1 := readCounter(mem.ID)
	time.Sleep(300 * time.Millisecond)
	mp2, mn2 := readCounter(mem.ID)
	if mp1 != pid0 || mp2 != pid0 || mn1 < 1 || mn2 <= mn1 {
		t.Fatalf("from the memory snapshot: counter pid %d -> %d, count %d -> %d; want process %d counting on", mp1, mp2, mn1, mn2, pid0)
	}
	if got := sh(mem.ID, "cat /home/user/state"); got != "kept\n" {
		t.Fatalf("from the memory snapshot: file %q", got)
	}
	kept := filepath.Join(state, "gvisor-snapshots", "*")
	if m, _ := filepath.Glob(kept); len(m) != 1 {
		t.Fatalf("kept memory images: %v, want 1", m)
	}
	if err := c.DeleteSnapshot(ctx, "gmem"); err != nil {
		t.Fatalf("delete the memory snapshot: %v", err)
	}
	if m, _ := filepath.Glob(kept); len(m) != 0 {
		t.Errorf("memory image left after its snapshot's delete: %v", m)
	}
	forks = append(forks, mem.ID)
	for _, id := range append(forks, sb.ID, nat.ID) {
		if err := c.KillSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range append(forks, sb.ID) {
		if _, err := os.Stat(filepath.Join(run, "gvisor", id)); err == nil {
			t.Errorf("run directory of %s left", id)
		}
		if procs := sandboxProcs(id); len(procs) > 0 {
			t.Errorf("processes of %s left: %v", id, procs)
		}
		if m, _ := filepath.Glob("/sys/fs/cgroup/*/warden/gv-" + id); len(m) > 0 {
			t.Errorf("cgroups of %s left: %v", id, m)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(run, "gvisor", ".snapshots", "*")); len(m) > 0 {
		t.Errorf("snapshots left: %v", m)
	}
}

// unmountUnder detaches every mount under dir (runsc's gofer namespace
// and sandboxes' network namespaces the test's daemon left; tests kill
// their sandboxes, but runsc keeps its null-netns on purpose).
func unmountUnder(dir string) {
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			unix.Unmount(f[4], unix.MNT_DETACH)
		}
	}
}

// sandboxProcs lists host processes whose command line names sandbox id.
func sandboxProcs(id string) []string {
	var out []string
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmdlines {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte("/"+id+"/")) {
			out = append(out, filepath.Base(filepath.Dir(p))+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}
