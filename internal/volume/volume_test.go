package volume

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/warden-sandbox/warden/internal/errkind"
	"github.com/warden-sandbox/warden/internal/store"
	"github.com/warden-sandbox/warden/internal/store/sqlite"
)

func newManager(t *testing.T) (*Manager, *sqlite.Store) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("VOLUMES UNTESTED: needs root (loop devices, mounts)")
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "w.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := New(Config{Dir: t.TempDir(), UID: 1000, GID: 1000}, st)
	if err != nil {
		t.Fatalf("this host cannot make volumes: %v", err)
	}
	return m, st
}

func loops(img string) int {
	n := 0
	devs, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, d := range devs {
		if b, err := os.ReadFile(d); err == nil && strings.TrimSpace(string(b)) == img {
			n++
		}
	}
	return n
}

// TestVolumeLifecycle: create, copy in and out, usage, quota (ENOSPC as
// ErrFull, the host unaffected, no half-written file), grow, delete; no
// mount or loop device is left between operations or after.
func TestVolumeLifecycle(t *testing.T) {
	m, _ := newManager(t)
	ctx := t.Context()
	v, err := m.Create(ctx, "alice", "data", 32<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, "alice", "data", 32<<20); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("second create: %v", err)
	}
	if _, err := m.Create(ctx, "alice", "../x", 32<<20); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad name: %v", err)
	}
	if _, err := m.Upload(ctx, v, "/dir/sub/hello.txt", strings.NewReader("hello"), 0); err != nil {
		t.Fatal(err)
	}
	if m.mountedOnHost(v.ID) || loops(m.image(v.ID)) != 0 {
		t.Fatal("the volume stays mounted after a copy")
	}
	var got []byte
	err = m.Download(ctx, v, "dir/sub/hello.txt", func(f *os.File, size int64) error {
		got, err = io.ReadAll(f)
		return err
	})
	if err != nil || string(got) != "hello" {
		t.Fatalf("download: %q %v", got, err)
	}
	if err := m.Download(ctx, v, "nope", func(*os.File, int64) error { return nil }); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("download of a missing file: %v", err)
	}
	if k, _ := errkind.Of(m.Download(ctx, v, "nope", nil)); k != errkind.NotFound {
		t.Fatalf("missing file kind %v", k)
	}
	// Ownership as the sandbox sees it.
	m.use(ctx, v.ID, func(dir string) error {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(dir, "dir/sub/hello.txt"), &st); err != nil || st.Uid != 1000 || st.Mode&0o777 != 0o644 {
			t.Errorf("copied file: uid %d mode %o err %v", st.Uid, st.Mode&0o777, err)
		}
		if err := unix.Stat(dir, &st); err != nil || st.Uid != 1000 {
			t.Errorf("volume root: uid %d err %v", st.Uid, err)
		}
		return nil
	})
	// The quota: a 64 MiB upload into 32 MiB fails as full, leaves no file.
	_, err = m.Upload(ctx, v, "big", io.LimitReader(zeros{}, 64<<20), 0)
	if !errors.Is(err, ErrFull) {
		t.Fatalf("upload past the quota: %v, want ErrFull", err)
	}
	if k, _ := errkind.Of(err); k != errkind.TooLarge {
		t.Fatalf("full kind %v", k)
	}
	m.use(ctx, v.ID, func(dir string) error {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.Name() != "dir" && e.Name() != "lost+found" {
				t.Errorf("left in the volume: %s", e.Name())
			}
		}
		return nil
	})
	info, err := m.Inspect(ctx, v)
	if err != nil || info.UsedBytes <= 0 || info.UsedBytes > 32<<20 {
		t.Fatalf("inspect: %+v %v", info, err)
	}
	// Grow, then the big file fits.
	if _, err := m.Resize(ctx, v, 16<<20); !errors.Is(err, ErrInvalid) {
		t.Fatalf("shrink: %v", err)
	}
	if v, err = m.Resize(ctx, v, 128<<20); err != nil {
		t.Fatal(err)
	}
	if _, err = m.Upload(ctx, v, "big", io.LimitReader(zeros{}, 64<<20), 0); err != nil {
		t.Fatalf("upload after growing: %v", err)
	}
	m.use(ctx, v.ID, func(dir string) error {
		var sf unix.Statfs_t
		unix.Statfs(dir, &sf)
		if total := int64(sf.Blocks) * sf.Bsize; total < 100<<20 {
			t.Errorf("filesystem of %d bytes after growing to 128 MiB", total)
		}
		return nil
	})
	if err := m.Delete(ctx, v); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m.image(v.ID)); !errors.Is(err, os.ErrNotExist) || loops(m.image(v.ID)) != 0 {
		t.Fatalf("image left after delete: %v", err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestVolumeAttach: attach mounts on the host, read-write excludes others,
// delete is refused while attached, detach unmounts.
func TestVolumeAttach(t *testing.T) {
	m, st := newManager(t)
	ctx := t.Context()
	if err := st.CreatePrincipal(ctx, store.Principal{ID: "alice", Kind: store.PrincipalAgent, Name: "alice", CreatedAt: timeNow()}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"sb-a", "sb-b"} {
		if err := st.CreateSandbox(ctx, store.Sandbox{ID: id, Template: "base", State: "starting", Owner: "alice", Backend: "native", CreatedAt: timeNow()}); err != nil {
			t.Fatal(err)
		}
	}
	v, err := m.Create(ctx, "alice", "shared", 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Attach(ctx, "alice", "sb-a", []Request{{Name: "shared", Path: "/proc/x"}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("attach under /proc: %v", err)
	}
	if _, err := m.Attach(ctx, "bob", "sb-a", []Request{{Name: "shared", Path: "/data"}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another owner's volume: %v", err)
	}
	mounts, err := m.Attach(ctx, "alice", "sb-a", []Request{{Name: "shared", Path: "/data"}})
	if err != nil || len(mounts) != 1 || mounts[0].Target != "/data" || !m.mountedOnHost(v.ID) {
		t.Fatalf("attach: %+v %v", mounts, err)
	}
	if _, err := m.Attach(ctx, "alice", "sb-b", []Request{{Name: "shared", Path: "/data", ReadOnly: true}}); !errors.Is(err, ErrInUse) {
		t.Fatalf("read-only beside read-write: %v", err)
	}
	if err := m.Delete(ctx, v); !errors.Is(err, ErrInUse) {
		t.Fatalf("delete while mounted: %v", err)
	}
	if k, _ := errkind.Of(m.Delete(ctx, v)); k != errkind.Conflict {
		t.Fatalf("delete while mounted kind %v", k)
	}
	m.Detach(ctx, "sb-a")
	if m.mountedOnHost(v.ID) {
		t.Fatal("still mounted after the last detach")
	}
	if err := m.Delete(ctx, v); err != nil {
		t.Fatal(err)
	}
}

// TestVolumePlantedSymlinks: files a sandbox planted (symlinks out of the
// volume, to its root, through a directory) are never followed.
func TestVolumePlantedSymlinks(t *testing.T) {
	m, _ := newManager(t)
	ctx := t.Context()
	v, err := m.Create(ctx, "alice", "evil", 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret"), 0o600)
	m.use(ctx, v.ID, func(dir string) error {
		os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "link"))
		os.Symlink(outside, filepath.Join(dir, "dirlink"))
		os.Symlink("/", filepath.Join(dir, "root"))
		return nil
	})
	for _, p := range []string{"link", "dirlink/secret", "root/etc/passwd", "../../etc/passwd", "a/../../x"} {
		err := m.Download(ctx, v, p, func(f *os.File, _ int64) error {
			b, _ := io.ReadAll(f)
			t.Errorf("read %s through %s", b, p)
			return nil
		})
		if err == nil {
			t.Errorf("download %s: no error", p)
		}
		if _, err := m.Upload(ctx, v, p, strings.NewReader("x"), 0); err == nil {
			t.Errorf("upload %s: no error", p)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); !bytes.Equal(b, []byte("host secret")) {
		t.Fatalf("host file changed: %q", b)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Fatalf("files written outside the volume: %v", ents)
	}
	m.Delete(ctx, v)
}

func timeNow() time.Time { return time.Now().UTC() }
