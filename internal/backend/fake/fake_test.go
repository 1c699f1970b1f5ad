package fake_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/warden-sandbox/warden/internal/backend"
	"github.com/warden-sandbox/warden/internal/backend/backendtest"
	"github.com/warden-sandbox/warden/internal/backend/fake"
	"github.com/warden-sandbox/warden/internal/isolation/landlock"
)

// TestConformance runs the conformance suite's non-isolation part against
// the fake backend. It needs no root: run it as any user.
func TestConformance(t *testing.T) {
	state := shortTempDir(t)
	newBackend := func(t *testing.T) backend.Backend {
		b, err := fake.New(fake.Config{StateDir: state})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	leftovers := func(t *testing.T, id string) []string {
		return newBackend(t).(*fake.Backend).Leftovers(id)
	}
	spec := func(t *testing.T, id string) backend.Spec {
		return backend.Spec{ID: id, Layers: []backend.Layer{{Target: "/", Path: "/"}}}
	}
	backendtest.RunNonIsolation(t, backendtest.Factory{New: newBackend, Spec: spec, Leftovers: leftovers, Unconfined: true})
}

// TestNeverRoot checks that sandbox processes never run as the host's root:
// as root, the fake runs them as nobody.
func TestNeverRoot(t *testing.T) {
	state := shortTempDir(t)
	f := backendtest.Factory{
		New: func(t *testing.T) backend.Backend {
			b, err := fake.New(fake.Config{StateDir: state})
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		Spec: func(t *testing.T, id string) backend.Spec {
			return backend.Spec{ID: id, Layers: []backend.Layer{{Target: "/", Path: "/"}}}
		},
	}
	s := backendtest.Start(t, f, f.New(t), nil)
	for _, user := range []string{"", "root"} {
		if got := s.Sh(t, user, "id -u"); got == "0\n" {
			t.Errorf("user %q runs as the host's root", user)
		}
	}
}

// TestCapabilities checks the fake claims no isolation and no root.
func TestCapabilities(t *testing.T) {
	b, err := fake.New(fake.Config{StateDir: shortTempDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	c := b.Capabilities()
	if c.Isolation != "none" || c.NeedsRoot || !c.Pause || c.Fork || c.CaptureUpper {
		t.Fatalf("capabilities = %+v", c)
	}
}

// TestNotRegistered checks the fake cannot be selected in wardend: it is
// not in the backend registry.
func TestNotRegistered(t *testing.T) {
	if _, ok := backend.Lookup(fake.ID); ok {
		t.Fatal("the fake backend is registered; wardend could select it")
	}
}

// TestRecoverNeverStarted checks a created but never started sandbox is lost
// on recovery and leaves nothing behind.
func TestRecoverNeverStarted(t *testing.T) {
	state := shortTempDir(t)
	b, _ := fake.New(fake.Config{StateDir: state})
	h, err := b.Create(context.Background(), backend.Spec{ID: "never", Layers: []backend.Layer{{Target: "/", Path: "/"}}})
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := fake.New(fake.Config{StateDir: state})
	if err := b2.Recover(context.Background(), h); err == nil {
		t.Fatal("recovered a sandbox that never started")
	}
	if left := b2.Leftovers(h.ID); len(left) > 0 {
		t.Fatalf("leftovers: %v", left)
	}
}

// shortTempDir returns a temporary directory with a short path, so agent
// socket paths stay within the unix socket limit, that nobody can reach.
func shortTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "fake-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	os.Chmod(d, 0o755) // as root, agents run as nobody
	return filepath.Clean(d)
}

// TestWritesConfined checks that a sandbox process cannot write outside its
// sandbox directory (a test meant for a real sandbox's /tmp must fail, not
// leave files on the host).
func TestWritesConfined(t *testing.T) {
	if landlock.ABI() == 0 {
		t.Skip("SKIPPED LOUDLY: the kernel has no Landlock; the fake cannot confine writes here")
	}
	state := shortTempDir(t)
	f := backendtest.Factory{
		New: func(t *testing.T) backend.Backend {
			b, err := fake.New(fake.Config{StateDir: state})
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		Spec: func(t *testing.T, id string) backend.Spec {
			return backend.Spec{ID: id, Layers: []backend.Layer{{Target: "/", Path: "/"}}}
		},
	}
	s := backendtest.Start(t, f, f.New(t), nil)
	p := filepath.Join(os.TempDir(), "fake-escape-"+s.H.ID)
	if _, _, res := s.Exec(t, "", "sh", "-c", "echo x > "+p); res.ExitCode == 0 {
		os.Remove(p)
		t.Fatalf("a sandbox process wrote %s on the host", p)
	}
	if _, err := os.Stat(p); err == nil {
		os.Remove(p)
		t.Fatalf("%s exists", p)
	}
	s.Sh(t, "", `echo ok > "$TMPDIR/inside"`)
}
