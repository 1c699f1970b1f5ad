package gvisor_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/backend/backendtest"
	"github.com/warden-sandbox/warden/internal/isolation/diskimg"
)

// TestGvisorVolumesAndCapture: one sandbox with a volume, then a sandbox on
// a filesystem snapshot of it.
//
// Volumes, beyond the conformance suite's case: one under a deeper
// template target (/usr, which the init overlays after runsc's mounts) is
// seen; writes reach the host's file at once (not gVisor's overlay or
// cache) and host writes are seen; a full volume is ENOSPC for the writer;
// the volume stays across a pause and resume (a checkpoint and restore);
// a sandbox with volumes cannot be forked.
//
// The snapshot of the running sandbox: the copy of the writable layer of
// "/" has the sandbox's files with the ids it sees, a whiteout for a
// deleted template file, an opaque directory for one removed and made
// again, no volume contents and no /.warden; the sandbox runs on, its
// processes as they were, also with a file larger than its host cgroup's
// memory headroom (gVisor's tar holds it in the sentry's memory: the
// capture raises the host limit for the copy, and lowers it again after);
// a paused (checkpointed) sandbox is refused. (A sandbox booting on such a
// copy: test/integration's TestGVisor.)
func TestGvisorVolumesAndCapture(t *testing.T) {
	ctx := context.Background()
	b := newBackend(t)
	fc, ok := b.(backend.FSCapturer)
	if !ok {
		t.Fatal("the gvisor backend is no FSCapturer")
	}
	if _, ok := b.(backend.LiveCapturer); !ok {
		t.Fatal("the gvisor backend is no LiveCapturer: the manager would pause (checkpoint) it for the copy")
	}
	pool, err := diskimg.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	vol := t.TempDir()
	if err := pool.Mount("gv-vol", 16<<20, vol, 1000); err != nil {
		t.Fatalf("mount an ext4 volume: %v", err)
	}
	t.Cleanup(func() { pool.Remove("gv-vol", vol) })
	f := backendtest.Factory{New: newBackend, Spec: baseSpec}
	s := backendtest.Start(t, f, b, func(sp *backend.Spec) {
		sp.Volumes = []backend.VolumeMount{{Source: vol, Target: "/usr/local/vol"}}
		// Small, so that a file of the layer outgrows the host cgroup's
		// headroom: gVisor's tar holds a file in the sentry's memory.
		sp.Limits.MemoryBytes = 32 << 20
	})

	// The volume.
	s.Sh(t, "user", "echo one > /usr/local/vol/f")
	if raw, err := os.ReadFile(filepath.Join(vol, "f")); err != nil || string(raw) != "one\n" {
		t.Fatalf("the host's file after a write in the sandbox: %q %v", raw, err)
	}
	var vst syscall.Stat_t
	if err := syscall.Stat(filepath.Join(vol, "f"), &vst); err != nil || vst.Uid != 1000 || vst.Gid != 1000 {
		t.Errorf("owner on the host: %d:%d, want 1000:1000 (%v)", vst.Uid, vst.Gid, err)
	}
	if err := os.WriteFile(filepath.Join(vol, "h"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := s.Sh(t, "user", "cat /usr/local/vol/h"); got != "from the host\n" {
		t.Errorf("a host write seen in the sandbox: %q", got)
	}
	out, _, res := s.Exec(t, "user", "/bin/sh", "-c", "dd if=/dev/zero of=/usr/local/vol/big bs=1M count=64 2>&1")
	if res.ExitCode == 0 || !strings.Contains(out, "No space left") {
		t.Errorf("writing past the volume's size: exit %d: %s", res.ExitCode, out)
	}
	s.Sh(t, "user", "rm /usr/local/vol/big")
	if _, err := b.(backend.Snapshotter).Snapshot(ctx, s.H); !errors.Is(err, backend.ErrUnsupported) {
		t.Errorf("fork snapshot of a sandbox with volumes: %v, want ErrUnsupported", err)
	}

	// The snapshot.
	s.Sh(t, "user", `set -e
mkdir -p ~/work && echo hello > ~/work/a.txt && ln ~/work/a.txt ~/work/hard && ln -s work/a.txt ~/link
head -c 150000000 /dev/zero > ~/big
(sleep 1000 &) ; sleep 0.2`)
	s.Sh(t, "root", `set -e
rm /etc/warden-base-packages
test -n "$(ls /etc/alternatives)"
rm -rf /etc/alternatives && mkdir /etc/alternatives && echo new > /etc/alternatives/only
echo x > /suid && chmod 4755 /suid`)
	pids := s.Sh(t, "", "pgrep -x sleep | sort")
	var layer string
	err = fc.CaptureFS(ctx, s.H, func(target string) (string, error) {
		if target != "/" {
			t.Errorf("asked for a layer of %s", target)
		}
		layer = filepath.Join(t.TempDir(), "layer")
		return layer, os.Mkdir(layer, 0o700)
	})
	if err != nil {
		t.Fatalf("capture: %v", err)
	}
	if layer == "" {
		t.Fatal("no layer was made")
	}
	if got := s.Sh(t, "", "pgrep -x sleep | sort"); got != pids || pids == "" {
		t.Errorf("processes after the capture: %q, before %q", got, pids)
	}
	if st, _ := b.Status(ctx, s.H); st != backend.StateRunning {
		t.Errorf("status after the capture: %s", st)
	}
	s.Sh(t, "user", "echo after > ~/after && rm ~/big")

	check := func(rel string, uid int, mode uint32) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(layer, rel), &st); err != nil {
			t.Errorf("%s: %v", rel, err)
			return
		}
		if int(st.Uid) != uid || (mode != 0 && st.Mode&0o7777 != mode) {
			t.Errorf("%s: owner %d mode %o, want %d %o", rel, st.Uid, st.Mode&0o7777, uid, mode)
		}
	}
	check("home/user/work/a.txt", 1000, 0)
	check("home/user/link", 1000, 0)
	check("suid", 0, 0o4755)
	if fi, err := os.Stat(filepath.Join(layer, "home/user/big")); err != nil || fi.Size() != 150000000 {
		t.Errorf("the big file in the layer: %v %v", fi, err)
	}
	if raw, err := os.ReadFile(filepath.Join(layer, "home/user/work/a.txt")); err != nil || string(raw) != "hello\n" {
		t.Errorf("content: %q %v", raw, err)
	}
	var a, h, w unix.Stat_t
	unix.Lstat(filepath.Join(layer, "home/user/work/a.txt"), &a)
	unix.Lstat(filepath.Join(layer, "home/user/work/hard"), &h)
	if a.Ino == 0 || a.Ino != h.Ino {
		t.Error("the hard link became a copy")
	}
	if err := unix.Lstat(filepath.Join(layer, "etc/warden-base-packages"), &w); err != nil || w.Mode&unix.S_IFMT != unix.S_IFCHR || w.Rdev != 0 {
		t.Errorf("no whiteout for the deleted /etc/warden-base-packages: mode %o (%v)", w.Mode, err)
	}
	buf := make([]byte, 8)
	if n, err := unix.Lgetxattr(filepath.Join(layer, "etc/alternatives"), "user.overlay.opaque", buf); err != nil || string(buf[:n]) != "y" {
		t.Errorf("the remade /etc/alternatives is not opaque: %q %v", buf[:max(n, 0)], err)
	}
	for _, rel := range []string{".warden", "usr", "home/user/after"} {
		if _, err := os.Lstat(filepath.Join(layer, rel)); err == nil {
			t.Errorf("%s is in the layer", rel)
		}
	}

	// Paused (on disk): nothing to copy from; the volume is there after
	// the resume.
	p := b.(backend.Pauser)
	if err := p.Pause(ctx, s.H); err != nil {
		t.Fatalf("pause: %v", err)
	}
	err = fc.CaptureFS(ctx, s.H, func(string) (string, error) { return t.TempDir(), nil })
	if !errors.Is(err, backend.ErrUnsupported) {
		t.Errorf("capture of a paused sandbox: %v, want ErrUnsupported", err)
	}
	if err := p.Resume(ctx, s.H); err != nil {
		t.Fatalf("resume: %v", err)
	}
	// The host cgroup's memory limit, raised for the copy, goes back once
	// the sentry's memory is under it: at the latest after the pause (a
	// new sentry), else when the old one's Go runtime returned the tar's
	// memory (its periodic GC, up to 2 minutes on an idle sandbox).
	lim := hostLimitFile(t, s.H.ID)
	want := strconv.Itoa(32<<20 + 128<<20)
	t0 := time.Now()
	for {
		raw, err := os.ReadFile(lim)
		if err == nil && strings.TrimSpace(string(raw)) == want {
			break
		}
		if time.Since(t0) > time.Minute {
			t.Fatalf("host memory limit %q after the capture, want %s (%v)", raw, want, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("host memory limit back after %v", time.Since(t0))
	s.Sh(t, "user", "test \"$(cat /usr/local/vol/f)\" = one && echo two > /usr/local/vol/f")
	if raw, err := os.ReadFile(filepath.Join(vol, "f")); err != nil || string(raw) != "two\n" {
		t.Fatalf("the host's file after a write that followed a resume: %q %v", raw, err)
	}
}

// hostLimitFile is the memory limit file of sandbox id's host cgroup.
func hostLimitFile(t *testing.T, id string) string {
	t.Helper()
	for _, p := range []string{"/sys/fs/cgroup/memory/warden/gv-" + id + "/memory.limit_in_bytes", "/sys/fs/cgroup/warden/gv-" + id + "/memory.max"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatalf("no memory limit file for the host cgroup of %s", id)
	return ""
}
