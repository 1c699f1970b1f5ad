package native_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/backend/backendtest"
	"github.com/warden-sandbox/warden/internal/backend/native"
)

// TestSudoAttached: on kernels before 6.15 (which cannot clone a file of a
// detached mount) the sudo fs is attached at <run dir>/.sudo-fs; forced
// here on any kernel. Sandboxes' sudo shows no host path there either; a
// mount in the way is replaced, a backend after a crash reuses the one
// there, Close unmounts it and removes the directory, and sandboxes keep
// their sudo.
func TestSudoAttached(t *testing.T) {
	defer native.SetSudoAttach(true)()
	at := filepath.Join(runDir, native.SudoDir)
	f := backendtest.Factory{New: newBackend, Spec: baseSpec, HostPaths: hostPaths}
	t.Run("Sudo", func(t *testing.T) {
		backendtest.Sudo(t, f)
	})
	noSudoFS(t, at)

	t.Run("Lifecycle", func(t *testing.T) {
		on := func(sp *backend.Spec) { sp.Sudo = true }
		// Something else mounted where the sudo fs goes is replaced.
		if err := os.MkdirAll(at, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("stray", at, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatalf("mount a stray tmpfs: %v", err)
		}
		t.Cleanup(func() { unix.Unmount(at, unix.MNT_DETACH) })
		b1 := newBackend(t)
		s1 := backendtest.Start(t, f, b1, on)
		id := checkSudoFS(t, at)
		mi := strings.Fields(s1.Sh(t, "root", `grep " /usr/local/bin/sudo " /proc/self/mountinfo`))
		if len(mi) < 7 || mi[3] != "/warden-agent" {
			t.Errorf("sandbox's sudo mount %q: want root /warden-agent", mi)
		}
		for _, o := range mi[6:] {
			if o == "-" {
				break
			}
			if strings.HasPrefix(o, "shared:") || strings.HasPrefix(o, "master:") {
				t.Errorf("sandbox's sudo mount %q propagates (%s): want private", mi, o)
			}
		}
		// A second backend (a daemon restarted after a crash, which did
		// not close) reuses the fs there.
		b2 := newBackend(t)
		s2 := backendtest.Start(t, f, b2, on)
		if id2 := checkSudoFS(t, at); id2 != id {
			t.Errorf("second backend mounted its own sudo fs (mount %s, was %s); want the first's reused", id2, id)
		}
		for _, b := range []backend.Backend{b1, b2} {
			if err := b.(io.Closer).Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
		}
		noSudoFS(t, at)
		// Running sandboxes keep their sudo.
		for _, s := range []*backendtest.Sandbox{s1, s2} {
			if got := strings.TrimSpace(s.Sh(t, "user", "sudo id -u")); got != "0" {
				t.Errorf("sudo id -u after close = %q, want 0", got)
			}
		}
	})
	noSudoFS(t, at)
}

// hostMounts returns the fields of the host's mountinfo lines whose mount
// point is at.
func hostMounts(t *testing.T, at string) [][]string {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, l := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(l); len(f) > 4 && strings.HasPrefix(f[4], at) {
			out = append(out, f)
		}
	}
	return out
}

// checkSudoFS checks that exactly the sudo fs is mounted at at: one
// read-only tmpfs named warden-agent whose root is 0700. It returns the
// mount's id.
func checkSudoFS(t *testing.T, at string) string {
	t.Helper()
	ms := hostMounts(t, at)
	if len(ms) != 1 {
		t.Fatalf("mounts at %s: %q, want exactly the sudo fs", at, ms)
	}
	m := strings.Join(ms[0], " ")
	if ms[0][4] != at || !strings.Contains(","+ms[0][5]+",", ",ro,") || !strings.Contains(m, " - tmpfs warden-agent ") {
		t.Errorf("mount at %s: %q, want the read-only tmpfs warden-agent", at, m)
	}
	if st, err := os.Stat(at); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("stat %s: %v, %v; want mode 0700", at, st.Mode(), err)
	}
	return ms[0][0]
}

// noSudoFS checks that nothing is mounted at at and that it is gone.
func noSudoFS(t *testing.T, at string) {
	t.Helper()
	if ms := hostMounts(t, at); len(ms) > 0 {
		t.Errorf("mounts left at %s: %q", at, ms)
	}
	if _, err := os.Lstat(at); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s left behind (%v)", at, err)
	}
}
