package gvisor_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/agentclient"
	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/backend/backendtest"
	"github.com/warden-sandbox/warden/internal/backend/gvisor"
	"github.com/warden-sandbox/warden/internal/template"
)

var (
	agentBin string
	runDir   string
	tmplRoot string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "SKIP: the gvisor backend tests need root (CI runs as root); skipping the whole package")
		return 0
	}
	dir, err := os.MkdirTemp("", "warden-gvisor-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	agentBin = filepath.Join(dir, "warden-agent")
	build := exec.Command("go", "build", "-o", agentBin, "github.com/warden-sandbox/warden/cmd/warden-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build warden-agent: %v\n%s", err, out)
		return 1
	}
	runDir = filepath.Join(dir, "run")
	tmplRoot = filepath.Join(dir, "templates")
	// runsc keeps one empty network namespace for the gofers of all the
	// sandboxes under its state directory, bind-mounted there.
	defer unix.Unmount(filepath.Join(runDir, ".runsc", "null-netns"), unix.MNT_DETACH)
	return m.Run()
}

func newBackend(t *testing.T) backend.Backend {
	t.Helper()
	if err := gvisor.Preflight(); err != nil {
		t.Fatalf("the gvisor backend cannot run here: %v", err)
	}
	// As wardend runs it: the writable layer of "/" in a disk image.
	b, err := gvisor.New(gvisor.Config{RunDir: runDir, AgentPath: agentBin, DiskDir: diskDir()})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func baseSpec(t *testing.T, id string) backend.Spec {
	t.Helper()
	tm, err := template.EnsureBase(tmplRoot)
	if err != nil {
		t.Fatalf("base template: %v", err)
	}
	return tm.Spec(id)
}

// leftovers looks for anything on the host that still belongs to sandbox id.
func leftovers(t *testing.T, id string) []string {
	var left []string
	if _, err := os.Stat(filepath.Join(runDir, id)); err == nil {
		left = append(left, "run directory "+filepath.Join(runDir, id))
	}
	if _, err := os.Stat(filepath.Join(diskDir(), id+".img")); err == nil {
		left = append(left, "disk image "+filepath.Join(diskDir(), id+".img"))
	}
	// A checkpoint, of a pause or of a stop that kept the files.
	for _, p := range []string{filepath.Join(runDir, "checkpoints", id), filepath.Join(runDir, "checkpoints", id+".new")} {
		if _, err := os.Stat(p); err == nil {
			left = append(left, "checkpoint "+p)
		}
	}
	cg := "gv-" + id
	matches, _ := filepath.Glob("/sys/fs/cgroup/*/warden/" + cg)
	left = append(left, matches...)
	if _, err := os.Stat("/sys/fs/cgroup/warden/" + cg); err == nil {
		left = append(left, "/sys/fs/cgroup/warden/"+cg)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), "/"+cg+"\n") {
			left = append(left, "process "+filepath.Base(filepath.Dir(p)))
		}
	}
	// Processes of the sandbox by command line too (a sentry or gofer that
	// never made it into the cgroup).
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range cmdlines {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), filepath.Join(runDir, id)+"/") {
			left = append(left, "process "+filepath.Base(filepath.Dir(p))+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if strings.Contains(sc.Text(), id) {
				left = append(left, "mount "+sc.Text())
			}
		}
		f.Close()
	}
	// runsc's state for the container.
	state, _ := os.ReadDir(filepath.Join(runDir, ".runsc"))
	for _, e := range state {
		if strings.Contains(e.Name(), id) {
			left = append(left, "runsc state "+e.Name())
		}
	}
	return left
}

// hostPaths are the gvisor backend's host paths that no sandbox may see.
func hostPaths(t *testing.T, h backend.Handle) []string {
	d := filepath.Join(runDir, h.ID)
	return []string{runDir, d, filepath.Join(d, "control"), filepath.Join(d, "control", "agent.sock"), filepath.Join(d, "rootfs"),
		filepath.Join(d, "upper"), filepath.Join(d, "bundle", "config.json"), filepath.Join(runDir, ".runsc"),
		filepath.Join(runDir, ".warden-agent"), agentBin, tmplRoot}
}

func TestConformance(t *testing.T) {
	backendtest.Run(t, backendtest.Factory{New: newBackend, Spec: baseSpec, Leftovers: leftovers, HostPaths: hostPaths,
		HostDisk: func(t *testing.T, h backend.Handle) []string {
			// The writable layer of "/": gVisor's filestore on the sandbox's image.
			return []string{filepath.Join(diskDir(), h.ID+".img")}
		}})
}

// TestPausedAcrossReboot pauses a sandbox, then takes away everything a host
// reboot takes (the run directory on /run's tmpfs, its mounts, runsc's
// state, the cgroups, the backend's memory) and keeps only the checkpoint
// directory: a new backend finds the sandbox paused and resumes it with its
// running process, that process's memory and its files.
func TestPausedAcrossReboot(t *testing.T) {
	ctx := context.Background()
	b := newBackend(t)
	s := backendtest.Start(t, backendtest.Factory{New: newBackend, Spec: baseSpec}, b, nil)
	s.Sh(t, "", "echo kept > /home/user/state; (sh -c 'i=0; while :; do i=$((i+1)); echo \"$$ $i\" > /tmp/c.new; mv /tmp/c.new /tmp/c; sleep 0.05; done' >/dev/null 2>&1 &); sleep 0.5")
	read := func(s *backendtest.Sandbox) (pid, n int) {
		fmt.Sscan(s.Sh(t, "", "cat /tmp/c"), &pid, &n)
		return pid, n
	}
	pid0, n0 := read(s)
	if err := b.(backend.Pauser).Pause(ctx, s.H); err != nil {
		t.Fatalf("pause: %v", err)
	}
	// The reboot.
	dir := filepath.Join(runDir, s.H.ID)
	if raw, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		var mounts []string
		for _, line := range strings.Split(string(raw), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
				mounts = append(mounts, f[4])
			}
		}
		for i := len(mounts) - 1; i >= 0; i-- {
			if err := unix.Unmount(mounts[i], unix.MNT_DETACH); err != nil {
				t.Fatalf("unmount %s: %v", mounts[i], err)
			}
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	state, _ := filepath.Glob(filepath.Join(runDir, ".runsc", s.H.ID+"*"))
	for _, p := range state {
		os.RemoveAll(p)
	}
	cgs, _ := filepath.Glob("/sys/fs/cgroup/*/warden/gv-" + s.H.ID)
	if v2 := "/sys/fs/cgroup/warden/gv-" + s.H.ID; fileExists(v2) {
		cgs = append(cgs, v2)
	}
	for _, cg := range cgs {
		if err := os.Remove(cg); err != nil {
			t.Fatalf("remove cgroup %s: %v", cg, err)
		}
	}
	// The daemon after the reboot.
	b2 := newBackend(t)
	if err := b2.Recover(ctx, s.H); err != nil {
		t.Fatalf("recover after a reboot: %v", err)
	}
	if st, _ := b2.Status(ctx, s.H); st != backend.StatePaused {
		t.Fatalf("status after a reboot = %q, want paused", st)
	}
	if err := b2.(backend.Pauser).Resume(ctx, s.H); err != nil {
		t.Fatalf("resume after a reboot: %v", err)
	}
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) { return b2.DialAgent(ctx, s.H) })
	defer c.Close()
	s2 := &backendtest.Sandbox{B: b2, H: s.H, Client: c}
	pid1, n1 := read(s2)
	time.Sleep(300 * time.Millisecond)
	pid2, n2 := read(s2)
	if pid1 != pid0 || pid2 != pid0 || n1 < n0 || n2 <= n1 {
		t.Fatalf("counter across a reboot: pid %d -> %d -> %d, count %d -> %d -> %d", pid0, pid1, pid2, n0, n1, n2)
	}
	if got := s2.Sh(t, "", "cat /home/user/state"); got != "kept\n" {
		t.Fatalf("file after a reboot: %q", got)
	}
	if err := b2.Delete(ctx, s.H); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, s.H.ID); len(left) > 0 {
		t.Fatalf("leftovers: %v", left)
	}
	if _, err := os.Stat(filepath.Join(runDir, "checkpoints", s.H.ID)); err == nil {
		t.Fatalf("the checkpoint outlived the sandbox")
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// diskDir holds the sandboxes' disk images.
func diskDir() string { return filepath.Join(filepath.Dir(runDir), "disks") }

// TestPauseResumeFailures: a pause whose checkpoint cannot be written leaves
// the sandbox running (its process counting on, its agent answering), and a
// resume that fails keeps the checkpoint for a retry that then succeeds.
func TestPauseResumeFailures(t *testing.T) {
	ctx := context.Background()
	b := newBackend(t)
	s := backendtest.Start(t, backendtest.Factory{New: newBackend, Spec: baseSpec}, b, nil)
	s.Sh(t, "", "(sh -c 'i=0; while :; do i=$((i+1)); echo \"$$ $i\" > /tmp/c.new; mv /tmp/c.new /tmp/c; sleep 0.05; done' >/dev/null 2>&1 &); sleep 0.5")
	read := func() (pid, n int) {
		fmt.Sscan(s.Sh(t, "", "cat /tmp/c"), &pid, &n)
		return pid, n
	}
	pid0, n0 := read()
	// Make the image's directory impossible to create: its place is taken
	// by a file.
	ck := filepath.Join(runDir, "checkpoints", s.H.ID+".new")
	if err := os.WriteFile(ck, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	chattr := exec.Command("chattr", "+i", ck)
	if out, err := chattr.CombinedOutput(); err != nil {
		t.Fatalf("chattr +i (needed to make the checkpoint fail): %v: %s", err, out)
	}
	defer exec.Command("chattr", "-i", ck).Run()
	if err := b.(backend.Pauser).Pause(ctx, s.H); err == nil {
		t.Fatal("pause succeeded with its checkpoint directory blocked")
	} else {
		t.Logf("pause failed as it should: %v", err)
	}
	if st, _ := b.Status(ctx, s.H); st != backend.StateRunning {
		t.Fatalf("after a failed pause the sandbox is %q, want running", st)
	}
	pid1, n1 := read()
	time.Sleep(200 * time.Millisecond)
	pid2, n2 := read()
	if pid1 != pid0 || pid2 != pid0 || n1 < n0 || n2 <= n1 {
		t.Fatalf("after a failed pause: counter pid %d -> %d -> %d, count %d -> %d -> %d", pid0, pid1, pid2, n0, n1, n2)
	}
	exec.Command("chattr", "-i", ck).Run()
	os.Remove(ck)

	// A resume that fails: the bundle runsc restores from is missing.
	if err := b.(backend.Pauser).Pause(ctx, s.H); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(runDir, s.H.ID, "bundle", "config.json")
	if err := os.Rename(cfg, cfg+".away"); err != nil {
		t.Fatal(err)
	}
	if err := b.(backend.Pauser).Resume(ctx, s.H); err == nil {
		t.Fatal("resume succeeded without its bundle")
	}
	if st, _ := b.Status(ctx, s.H); st != backend.StatePaused {
		t.Fatalf("after a failed resume the sandbox is %q, want paused", st)
	}
	if _, err := os.Stat(filepath.Join(runDir, "checkpoints", s.H.ID, "checkpoint.img")); err != nil {
		t.Fatalf("after a failed resume the checkpoint is gone: %v", err)
	}
	if err := os.Rename(cfg+".away", cfg); err != nil {
		t.Fatal(err)
	}
	if err := b.(backend.Pauser).Resume(ctx, s.H); err != nil {
		t.Fatalf("retried resume: %v", err)
	}
	pid3, n3 := read()
	if pid3 != pid0 || n3 < n2 {
		t.Fatalf("after the retried resume: counter pid %d count %d, want pid %d from %d", pid3, n3, pid0, n2)
	}
}
